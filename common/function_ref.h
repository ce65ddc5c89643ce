// common/function_ref.h - a non-owning reference to something callable.
//
// For a parameter that is called while the call that takes it runs, and never kept: unlike
// std::function it never allocates (a lambda that captures more than two pointers' worth makes
// std::function allocate, each time the function taking it is called). The callable must outlive
// the call; an empty FunctionRef (default-constructed) tests false. Refers to objects (lambdas,
// function objects), not to plain functions.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace braid {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  FunctionRef() = default;
  template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_object_v<std::remove_reference_t<F>> &&
             std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f)  // NOLINT: converts implicitly, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }
  explicit operator bool() const { return call_ != nullptr; }

 private:
  void* object_ = nullptr;
  R (*call_)(void*, Args...) = nullptr;
};

}  // namespace braid
