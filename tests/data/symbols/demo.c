/* Test program for pmuscope.symbols: prints the runtime addresses of its
 * functions and of one function of libsymdemo.so, then waits for stdin. */
#include <stdio.h>
#include <unistd.h>

int lib_compute(int x);          /* from libsymdemo.so (when linked with -DWITH_LIB) */

static int __attribute__((noinline)) local_helper(int x) { return x * 3 + 1; }
int __attribute__((noinline)) alpha(int x) { return local_helper(x) + 7; }
int __attribute__((noinline)) beta(int x) {
    int s = 0;
    for (int i = 0; i < x; i++) s += alpha(i);
    return s;
}
int __attribute__((weak, noinline)) weak_gamma(int x) { return x - 1; }
int global_counter = 42;

int main(int argc, char **argv) {
    (void)argv;
    printf("alpha %p\nbeta %p\nlocal_helper %p\nweak_gamma %p\n",
           (void *)alpha, (void *)beta, (void *)local_helper, (void *)weak_gamma);
#ifdef WITH_LIB
    printf("lib_compute %p\n", (void *)lib_compute);
#endif
    printf("ready\n");
    fflush(stdout);
    if (argc > 1) {
        char buf[8];
        (void)!read(0, buf, sizeof buf);
    }
    return beta(3) + weak_gamma(1) > 0 ? 0 : 1;
}
