/* Shared library for pmuscope.symbols tests. */
static int __attribute__((noinline)) lib_private(int x) { return x ^ 0x5a; }
int __attribute__((noinline)) lib_compute(int x) { return lib_private(x) + 1; }
