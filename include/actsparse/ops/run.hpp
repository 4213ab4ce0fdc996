#pragma once
// Driving a backend's host protocol (can_implement → workspace_size → run), for engines and
// for the ops:
//   run(backend, args, workspace, executor)          the protocol on the caller's workspace (a
//                                                     std::vector that grows once, then stays)
//   run_checked(backend, args, workspace, executor)  the same after every argument check,
//                                                     index lists walked (O(|indices|)): for
//                                                     index lists that do not come from a
//                                                     selector
//   run(backend, args)                               a one-off call: its own workspace, the
//                                                     backend's default executor
//   runner<Backend>                                  a backend that owns its scratch and its
//                                                     executor: runner(args) for simple calls
// A not_handled status is returned as it is: the engine then runs its own kernel.

#include <actsparse/core/check_args.hpp>
#include <actsparse/core/concepts.hpp>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace actsparse {

template <class Backend, class Args>
status run(const Backend& backend, const Args& args, std::vector<std::byte>& workspace,
           typename Backend::executor_type& ex) {
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, Args);
  const status can = backend.can_implement(args);
  if (!can) return can;
  const std::size_t need = backend.workspace_size(args);
  if (workspace.size() < need) workspace.resize(need);
  return backend.run(args, std::span<std::byte>(workspace.data(), need), ex);
}

template <class Backend, class Args>
requires checkable_args<Args> status run_checked(const Backend& backend, const Args& args,
                                                 std::vector<std::byte>& workspace,
                                                 typename Backend::executor_type& ex) {
  check_arguments(args, "run_checked");
  return run(backend, args, workspace, ex);
}

template <class Backend, class Args>
requires std::default_initializable<typename Backend::executor_type> status run(const Backend& backend,
                                                                                const Args& args) {
  std::vector<std::byte> workspace;
  typename Backend::executor_type ex{};
  return run(backend, args, workspace, ex);
}

// A backend with its own workspace (grown on demand, reused) and executor. Not thread-safe:
// one runner per calling thread.
template <class Backend>
class runner {
 public:
  using executor_type = typename Backend::executor_type;

  runner() requires std::default_initializable<executor_type>
  = default;
  explicit runner(Backend backend, executor_type ex = {}) : backend_(std::move(backend)), ex_(std::move(ex)) {}

  template <class Args>
  status operator()(const Args& args) {
    return run(backend_, args, workspace_, ex_);
  }
  template <class Args>
  status checked(const Args& args) {
    return run_checked(backend_, args, workspace_, ex_);
  }

  [[nodiscard]] const Backend& backend() const noexcept { return backend_; }
  [[nodiscard]] Backend& backend() noexcept { return backend_; }
  [[nodiscard]] executor_type& executor() noexcept { return ex_; }

 private:
  Backend backend_{};
  executor_type ex_{};
  std::vector<std::byte> workspace_;
};

}  // namespace actsparse
