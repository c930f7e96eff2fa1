// ZeRO-1's shard layout (dist/parallel/zero/shard_layout.h).
#include "dist/parallel/zero/shard_layout.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace tinyddp::dist::zero {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t RoundUp(int64_t a, int64_t multiple) { return CeilDiv(a, multiple) * multiple; }

// Gloo's ring all_reduce cuts its buffer into segments of at most this many bytes
// (gloo::AllreduceOptions::kMaxSegmentSize, the default ProcessGroupGloo keeps).
constexpr int64_t kGlooMaxSegmentBytes = int64_t{1} << 20;
// kAligned blocks are whole multiples of this many elements: 64 bytes of float32, 32 of bfloat16.
constexpr int64_t kAlignedElements = 16;

}  // namespace

BlockSize BlockSizeFor(const char* backend_name) {
  return std::strcmp(backend_name, "gloo") == 0 ? BlockSize::kGlooChunks : BlockSize::kAligned;
}

int64_t ShardNumel(int64_t numel, int world, int64_t element_size, BlockSize size) {
  TINYDDP_CHECK_OP(numel >= 1 && world >= 1 && element_size >= 1, "zero::ShardNumel", "numel ", numel, ", world ",
                   world, ", element_size ", element_size, " must all be >= 1");
  // One rank owns the whole bucket: no sum to order, a block at offset 0 is aligned, and padding would only
  // make the one rank hold more than plain DDP does.
  if (world == 1) return numel;
  if (size == BlockSize::kAligned) return RoundUp(CeilDiv(numel, world), kAlignedElements);
  // Gloo's ring (gloo/allreduce.cc): at least 2 segments per rank so that sending one overlaps reducing
  // the other, segments of at most 1 MiB, and the same number of segments on every rank; each rank's
  // chunk is its run of consecutive segments.
  const int64_t bytes = numel * element_size;
  const int64_t max_segment = element_size * std::max<int64_t>(1, kGlooMaxSegmentBytes / element_size);
  const int64_t segments = RoundUp(std::max(CeilDiv(bytes, max_segment), int64_t{2} * world), world);
  const int64_t segment_elements = CeilDiv(CeilDiv(bytes, segments), element_size);
  return segments / world * segment_elements;
}

int64_t PaddedNumel(int64_t numel, int world, int64_t element_size, BlockSize size) {
  return world * ShardNumel(numel, world, element_size, size);
}

std::vector<ShardPiece> PiecesInShard(const std::vector<ParamSpan>& params, int64_t shard_numel, int rank) {
  const int64_t begin = rank * shard_numel, end = begin + shard_numel;
  std::vector<ShardPiece> pieces;
  for (const ParamSpan& p : params) {
    const int64_t from = std::max(begin, p.offset), to = std::min(end, p.offset + p.numel);
    if (from >= to) continue;
    pieces.push_back(ShardPiece{p.index, from - p.offset, from - begin, to - from});
  }
  return pieces;
}

}  // namespace tinyddp::dist::zero
