// The engine's cascade for bf16 caches: stage 09's tile as the prefix pass where
// the plan was made for it, the two-warp decode tile for the suffix pass; with
// and without learned sinks.
// engine::plan_cascade lives here, beside the passes it plans for.
#include "compose_cascade.cuh"
#include "going_further/two_warp_decode.cuh"

#include <memory>
#include <string>

namespace pa::engine {
namespace detail {
void cascade_bf16(const AttentionParams& p, const stage07::Cascade& c, cudaStream_t stream) {
  run_cascade_tiles<further::Bf16SplitTiles, true>(p, c, stream);
}
}  // namespace detail

stage07::Cascade plan_cascade(const AttentionParams& p, const BatchMeta& meta, const std::vector<PrefixGroup>& groups,
                              int force, PrefillTiles prefix_tiles) {
  const stage07::PrefixPassModel* model = nullptr;
  switch (prefix_tiles) {
    case PrefillTiles::automatic:
      if (detail::hopper_prefix_serves(p) && detail::hopper_code_runs()) model = &detail::HOPPER_PREFIX_PASS;
      break;
    case PrefillTiles::mma_sync: break;
    case PrefillTiles::hopper:
      PA_REQUIRE(detail::hopper_prefix_serves(p),
                 "engine::plan_cascade: stage 09's prefix pass (PrefillTiles::hopper) reads bf16 caches of at most "
                 "2^31 - 1 slots; this layer's cache is " + std::string(pa::name(p.kv.format)));
      detail::require_hopper_device("engine::plan_cascade: stage 09's prefix pass (PrefillTiles::hopper)");
      model = &detail::HOPPER_PREFIX_PASS;
      break;
  }
  stage07::Cascade c = stage07::plan(p, meta, groups, force, model);
  // The second stream and the suffix partials now, where a run will fork the
  // suffix pass onto it (one split included): a run only launches.
  if (detail::suffix_beside_prefix(p, c)) {
    c.side = std::make_unique<SideStream>();
    if (c.suffix_o.size() == 0) stage07::allocate_suffix_partials(c, p);
  }
  return c;
}

stage07::Path cascade_path(const AttentionParams& p, int members, int prefix_len, int queries, int suffix_len,
                           int num_sms) {
  const auto& hopper = detail::HOPPER_PREFIX_PASS;
  return (hopper.serves(p) ? hopper.choose : stage07::choose_path)(p, members, prefix_len, queries, suffix_len, num_sms);
}
}  // namespace pa::engine
