// FunctionRef: a non-owning reference to a callable, for callbacks that are only used during
// the call that receives them (Store::Scan, Store::Execute). Cheaper than std::function: no
// allocation, and it accepts move-only callables.

#ifndef IDEM_FUNCTION_REF_H_
#define IDEM_FUNCTION_REF_H_

#include <memory>
#include <type_traits>
#include <utility>

namespace idem {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                              std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f)  // NOLINT: implicit by design, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace idem

#endif  // IDEM_FUNCTION_REF_H_
