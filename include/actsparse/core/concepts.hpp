#pragma once
// One concept per role. Each is checked where a template uses it through
// ACTSPARSE_REQUIRE_* below, so a type that does not fit is rejected with a sentence
// that says what the role needs, not a page of substitution failures.

#include <actsparse/core/activation.hpp>
#include <actsparse/core/executor.hpp>
#include <actsparse/core/selection.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace actsparse {

// Scores candidates (neurons, tokens, input channels, experts): higher = more important.
//   typename S::input_type                      what it reads (a vector span, a matrix view)
//   s.score_count(in) -> size_t                 how many scores it writes for that input
//   s.score(in, std::span<float> out)           writes them (out.size() == score_count(in))
template <class S>
concept importance_scorer = std::copy_constructible<S> && requires {
  typename S::input_type;
} && requires(const S& s, const typename S::input_type& in, std::span<float> out) {
  { s.score_count(in) } -> std::convertible_to<std::size_t>;
  s.score(in, out);
};

// A scorer of FFN neurons: an importance_scorer whose input a neuron-sparse op builds from the
// d_ff neuron values it computed (g, act(g) or h, see score_source). Either input_type is
// constructible from std::span<const float>, or the scorer says how to build it:
//   static input_type neuron_input(std::span<const float> values, activation act);
// (weight_aware_gate does: it reads the pre-activation and the activation). A new scorer that
// reads something else is thus one header; the op never names a scorer.
template <class S>
concept neuron_scorer = importance_scorer<S> &&(requires(std::span<const float> v, activation a) {
  { S::neuron_input(v, a) } -> std::same_as<typename S::input_type>;
} || std::constructible_from<typename S::input_type, std::span<const float>>);

// The scorer's input built from the neuron values (the customisation point above).
template <neuron_scorer S>
[[nodiscard]] typename S::input_type neuron_input(std::span<const float> values, activation act) {
  if constexpr (requires { S::neuron_input(values, act); }) {
    return S::neuron_input(values, act);
  } else {
    return typename S::input_type(values);
  }
}

// Chooses which candidates to keep from their scores.
//   s.select(std::span<const float> scores, selection& out)
template <class S>
concept selector = std::copy_constructible<S> && requires(const S& s, std::span<const float> scores, selection& out) {
  s.select(scores, out);
};

// Gives per-layer parameters.
//   typename S::value_type;  s.at(layer) -> value_type
template <class S>
concept layer_schedule = requires {
  typename S::value_type;
}
&&requires(const S& s, std::size_t layer) {
  { s.at(layer) } -> std::convertible_to<typename S::value_type>;
};

// Where an activation row lives in a tiered store.
enum class tier : std::uint8_t { absent, full, compressed };

// Stores activation rows by position in a full-precision tier and a compressed tier.
template <class M>
concept activation_manager = requires(M& m, const M& cm, std::uint64_t pos, std::span<const float> row,
                                      std::span<float> out) {
  { cm.row_size() } -> std::convertible_to<std::size_t>;
  m.store(pos, row);
  cm.retrieve(pos, out);
  m.promote(pos);
  m.demote(pos);
  { cm.tier_of(pos) } -> std::same_as<tier>;
  { cm.bytes_held() } -> std::convertible_to<std::size_t>;
};

// Where a backend's buffers live: a tag type each backend names as B::memory_space. Core
// knows only ordinary host memory; a backend with memory of its own (a device, a unified
// buffer) defines its tag in its own headers.
struct host_memory {
  static constexpr std::string_view name = "host";
};

// A backend's answer to can_implement / run: done, or "not handled" so that the engine
// runs its own kernel instead. Invalid arguments (bad shapes) are errors, not statuses.
struct status {
  enum class code : std::uint8_t { ok, not_handled };
  code value = code::ok;
  std::string_view reason{};  // static text saying why it is not handled

  static constexpr status ok() noexcept { return {}; }
  static constexpr status not_handled(std::string_view why) noexcept { return {code::not_handled, why}; }
  [[nodiscard]] constexpr bool handled() const noexcept { return value == code::ok; }
  explicit constexpr operator bool() const noexcept { return handled(); }
};

// A backend: a traits-like type with
//   static constexpr std::string_view name;
//   typename B::memory_space    (host_memory, or the backend's own tag)
//   typename B::executor_type   (a CPU thread pool, a CUDA stream, a Metal queue)
// and, for each operation it offers (see backend_for), the host protocol
//   can_implement(args) -> status;  workspace_size(args) -> size_t;
//   run(args, std::span<std::byte> workspace, executor_type&) -> status.
// run's precondition is that can_implement(args) returned ok (actsparse::run, ops/run.hpp,
// drives the three calls); run checks the shapes in O(1), and actsparse::run_checked also
// walks every index list.
template <class B>
concept backend = requires {
  typename B::executor_type;
  typename B::memory_space;
  { B::name } -> std::convertible_to<std::string_view>;
};

template <class B, class Args>
concept backend_for = backend<B> &&
    requires(const B& b, const Args& args, std::span<std::byte> workspace, typename B::executor_type& ex) {
  { b.can_implement(args) } -> std::same_as<status>;
  { b.workspace_size(args) } -> std::convertible_to<std::size_t>;
  { b.run(args, workspace, ex) } -> std::same_as<status>;
};

// Optional: a backend's own elementwise activation, v[i] = act(v[i]). An op that computes
// act(g) on the host for a scorer and passes it to the backend's FFN (gated_ffn_args::gate_act)
// uses it, so that keep-all equals the backend's dense FFN bit for bit; without it the op uses
// the scalar functions of core/activation.hpp.
template <class B>
concept backend_with_activation = backend<B> && requires(const B& b, activation act, std::span<float> v) {
  b.activate(act, v);
};

}  // namespace actsparse

// Use these at the point where a template needs a role; the message is the diagnostic.
#define ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(S)                                                      \
  static_assert(::actsparse::importance_scorer<S>,                                                  \
                "actsparse: this type is not an importance_scorer. It needs: typename input_type; " \
                "std::size_t score_count(const input_type&) const; void score(const input_type&, "  \
                "std::span<float>) const.")
#define ACTSPARSE_REQUIRE_NEURON_SCORER(S)                                                                       \
  static_assert(::actsparse::neuron_scorer<S>,                                                                   \
                "actsparse: this type is not a neuron scorer. It needs what an importance_scorer needs, and an " \
                "input_type constructible from std::span<const float>, or static input_type "                    \
                "neuron_input(std::span<const float> values, actsparse::activation act).")
#define ACTSPARSE_REQUIRE_SELECTOR(S)                                                                           \
  static_assert(::actsparse::selector<S>,                                                                       \
                "actsparse: this type is not a selector. It needs: void select(std::span<const float> scores, " \
                "actsparse::selection& out) const.")
#define ACTSPARSE_REQUIRE_LAYER_SCHEDULE(S)                                                                \
  static_assert(::actsparse::layer_schedule<S>,                                                            \
                "actsparse: this type is not a layer_schedule. It needs: typename value_type; value_type " \
                "at(std::size_t layer) const.")
#define ACTSPARSE_REQUIRE_ACTIVATION_MANAGER(M)                                                              \
  static_assert(::actsparse::activation_manager<M>,                                                          \
                "actsparse: this type is not an activation_manager. It needs: row_size(), store(pos, row), " \
                "retrieve(pos, out) const, promote(pos), demote(pos), tier_of(pos) -> tier, bytes_held().")
#define ACTSPARSE_REQUIRE_BACKEND_FOR(B, Args)                                                   \
  static_assert(::actsparse::backend_for<B, Args>,                                               \
                "actsparse: this type is not a backend for this operation (" #Args               \
                "). It needs: name, memory_space, executor_type, and can_implement(const " #Args \
                "&) -> status, workspace_size(const " #Args "&), run(const " #Args               \
                "&, std::span<std::byte>, executor_type&) -> status.")
