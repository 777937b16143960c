// metal-emu: the subset of metal-cpp's Foundation (NS::) that lmtail's host code uses, with the
// same names and signatures, so csrc/metal/*.cpp compiles unchanged against either.
//
// The namespaces are renamed by macro (NS -> lmt_emu_NS) so that one binary can later hold the
// host code built twice, against Apple's metal-cpp and against this emulator.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#define NS lmt_emu_NS

namespace NS {

using UInteger = std::uintptr_t;
using Integer = std::intptr_t;

enum StringEncoding : UInteger { ASCIIStringEncoding = 1, UTF8StringEncoding = 4 };

// Reference counting as in Objective-C: new/alloc/copy return +1, everything else is borrowed
// or autoreleased into the innermost AutoreleasePool.
class Object {
  public:
    void release() {
        if (--rc_ == 0) delete this;
    }
    UInteger retainCount() const { return (UInteger)rc_.load(); }

  protected:
    Object() = default;
    virtual ~Object() = default;
    void retain_() { ++rc_; }
    void autorelease_();

  private:
    std::atomic<long> rc_{1};
};

template <class Derived>
class Referencing : public Object {
  public:
    Derived *retain() {
        retain_();
        return static_cast<Derived *>(this);
    }
    Derived *autorelease() {
        autorelease_();
        return static_cast<Derived *>(this);
    }
};

class String : public Referencing<String> {
  public:
    static String *string(const char *s, StringEncoding) {
        auto *o = new String(s ? s : "");
        return o->autorelease();
    }
    const char *utf8String() const { return s_.c_str(); }
    UInteger length() const { return (UInteger)s_.size(); }
    explicit String(std::string s) : s_(std::move(s)) {}

  private:
    std::string s_;
};

class Error : public Referencing<Error> {
  public:
    explicit Error(std::string m) : msg_(new String(std::move(m))) {}
    ~Error() override { msg_->release(); }
    String *localizedDescription() const { return msg_; }

  private:
    String *msg_;
};

class AutoreleasePool : public Referencing<AutoreleasePool> {
  public:
    static AutoreleasePool *alloc() { return new AutoreleasePool(); }
    AutoreleasePool *init();
    void drain() { release(); }
    void addObject_(Object *o) { objs_.push_back(o); }
    ~AutoreleasePool() override;

  private:
    AutoreleasePool() = default;
    std::vector<Object *> objs_;
    AutoreleasePool *prev_ = nullptr;
};

// metal-cpp's NS::SharedPtr: owns one reference.
template <class T>
class SharedPtr {
  public:
    SharedPtr() = default;
    ~SharedPtr() { reset(); }
    SharedPtr(const SharedPtr &o) : p_(o.p_) {
        if (p_) p_->retain();
    }
    SharedPtr(SharedPtr &&o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    SharedPtr &operator=(const SharedPtr &o) {
        if (o.p_) o.p_->retain();
        reset();
        p_ = o.p_;
        return *this;
    }
    SharedPtr &operator=(SharedPtr &&o) noexcept {
        if (this != &o) {
            reset();
            p_ = o.p_;
            o.p_ = nullptr;
        }
        return *this;
    }
    T *get() const { return p_; }
    T *operator->() const { return p_; }
    explicit operator bool() const { return p_ != nullptr; }
    void reset() {
        if (p_) p_->release();
        p_ = nullptr;
    }

  private:
    template <class U>
    friend SharedPtr<U> TransferPtr(U *);
    T *p_ = nullptr;
};
template <class T>
SharedPtr<T> TransferPtr(T *p) {
    SharedPtr<T> s;
    s.p_ = p;
    return s;
}
template <class T>
SharedPtr<T> RetainPtr(T *p) {
    if (p) p->retain();
    return TransferPtr(p);
}

}  // namespace NS
