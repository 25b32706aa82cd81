// C++ test program for pmuscope.symbols: mangled names of many shapes.
#include <map>
#include <string>
#include <vector>

namespace outer { namespace inner {
template <typename T> struct Box {
    T value;
    T get() const { return value; }
    template <typename U> U convert(U scale) const { return static_cast<U>(value) * scale; }
};
int __attribute__((noinline)) free_function(const std::string &s, int n) { return (int)s.size() + n; }
} }

struct Widget {
    virtual ~Widget() {}
    virtual int run(std::vector<int> &v) { v.push_back(1); return (int)v.size(); }
    static Widget *make() { return new Widget(); }
    int operator()(int a, long b) const { return a + (int)b; }
};

int main() {
    outer::inner::Box<int> b{3};
    outer::inner::Box<double> d{2.0};
    std::vector<int> v;
    std::map<std::string, std::vector<int>> m;
    m["x"] = v;
    Widget *w = Widget::make();
    int r = w->run(v) + b.get() + (int)d.convert<float>(2.0f) + b.convert<long>(3) + (*w)(1, 2L);
    delete w;
    return outer::inner::free_function("abc", r) > 0 ? 0 : 1;
}
