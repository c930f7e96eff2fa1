// Shard layout of ZeRO-1 (dist/parallel/zero/zero_optimizer.h): which elements of a DDP bucket each rank owns.
// A pure function of (bucket size, number of ranks), like bucket_assignment.h, so every rank computes the
// same layout and a test can check it without processes.
//
// A bucket is DDP's flat buffer of gradients (reducer.h): its parameters one after another, in bucket order.
// ZeRO-1 cuts it into `world` equal blocks, padded with zeros at the end, and rank r owns block r:
//
//     bucket b:  | 2.bias | 2.weight ....................... | 1.bias | pad |
//     blocks:    |  rank 0 block    |  rank 1 block    |  rank 2 block      |
//
// A reduce-scatter of the padded buffer leaves rank r the average of block r, rank r steps the optimizer
// for those elements only (the state of the others lives elsewhere), and an all-gather returns the new
// values of every block to every rank. A parameter may straddle two blocks: each owner steps its piece.
//
// The block size is about ceil(numel / world), chosen one of two ways (BlockSize):
//   kGlooChunks  Gloo's (CPU). With these blocks ZeRO-1 trains to the *same bits* as plain DDP. Floating-
//                point addition is not associative, so a sum over 3 or more ranks depends on its order.
//                Gloo's ring all_reduce (what DDP runs on CPU) is a reduce-scatter followed by an all-gather
//                over blocks of exactly this size (its "chunks": 2 or more segments of at most 1 MiB per rank),
//                adding each block in the ring's order; our Gloo reduce-scatter (gloo_ring_reduce_scatter.h)
//                runs the same ring. Same blocks, same order, same sums.
//   kAligned     NCCL's (GPU). Rounded up to 16 elements, so every rank's block starts 64-byte aligned and
//                the optimizer kernels take their vectorised path on every rank (a block at an odd offset
//                would be stepped element by element, and the slowest rank sets the pace). NCCL's own sum
//                orders are its own; on 1 and 2 ranks there is only one order (a + b), so the bits match DDP's
//                anyway.
#ifndef TINYDDP_DIST_PARALLEL_ZERO_SHARD_LAYOUT_H_
#define TINYDDP_DIST_PARALLEL_ZERO_SHARD_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tinyddp::dist::zero {

/// How blocks are sized (see above).
enum class BlockSize { kGlooChunks, kAligned };

/// kGlooChunks on a Gloo group, kAligned otherwise (NCCL).
BlockSize BlockSizeFor(const char* backend_name);

/// Elements in one rank's block of a bucket of `numel` elements of `element_size` bytes on `world` ranks.
/// At least ceil(numel / world), and a few elements more (the padding), per rank (one rank: numel, no padding):
///   kGlooChunks  below 2 for a bucket of up to 2 * world MiB, below its segments per rank beyond;
///   kAligned     below 16.
/// Preconditions: numel >= 1, world >= 1, element_size >= 1.
int64_t ShardNumel(int64_t numel, int world, int64_t element_size, BlockSize size);

/// The bucket padded to `world` whole blocks: world * ShardNumel(...).
int64_t PaddedNumel(int64_t numel, int world, int64_t element_size, BlockSize size);

/// One parameter's place in a bucket: its index (the caller's), first element and size.
struct ParamSpan {
  size_t index = 0;
  int64_t offset = 0;
  int64_t numel = 0;
};

/// The part of a parameter that falls in one rank's block.
struct ShardPiece {
  size_t index = 0;           // ParamSpan::index
  int64_t param_begin = 0;    // first element of the piece within the parameter (flattened)
  int64_t shard_begin = 0;    // where it sits in the rank's block
  int64_t numel = 0;          // > 0
};

/// The pieces of `params` inside block [rank * shard_numel, (rank + 1) * shard_numel), in bucket order.
/// Parameters outside the block contribute nothing; a block may be all padding (no pieces).
std::vector<ShardPiece> PiecesInShard(const std::vector<ParamSpan>& params, int64_t shard_numel, int rank);

}  // namespace tinyddp::dist::zero

#endif  // TINYDDP_DIST_PARALLEL_ZERO_SHARD_LAYOUT_H_
