// Internal to the runtime: building a three-queue device program from its sequential meaning.
// Shared by the GEMM compiler (gemm.cpp) and the network compiler (network.cpp).
//
// 1. Sequential meaning. A compiler emits instructions as if they ran one at a time, each on its
//    queue (LOAD, COMPUTE, STORE), with the buffers ("resources": a WB slot, a UB chunk, an ACC
//    buffer, a host-memory block) it reads and writes.
// 2. Hazards to tokens. Every cross-queue read-after-write and write-after-read on a resource
//    becomes a requirement "instruction X of queue Q may issue only after instruction Y of queue P
//    is done" (P, Q adjacent: LOAD<->COMPUTE, COMPUTE<->STORE; a LOAD<->STORE hazard must be
//    bridged through a COMPUTE NOP first, see Builder::bridge). Queues run in order and tokens are
//    counters, so the k-th pop of a channel is satisfied by its k-th push: walking the consumer
//    queue, a pop is placed only where the requirement exceeds what earlier pops already
//    guarantee, and the matching push on the producer at the required index. For the COMPUTE ->
//    LOAD "buffer free" channel the push may be placed later than required (but still before the
//    reloaded buffer's first use): this bounds the tokens in flight well below the 8-bit counters
//    without delaying any load, because a load is not dispatched earlier than that anyway.
// 3. Program order. The queues are merged into one stream: compute instructions in order; before
//    each, the loads whose first consumer is at most `lookahead` compute instructions ahead (and
//    whose pop partner is already in the stream); after each, every store whose pop partner is in
//    the stream. Every pop therefore follows its push in program order, which makes the program
//    deadlock-free with any queue depth.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "tpuw/asm.h"
#include "tpuw/device.h"
#include "tpuw/spec.h"

namespace tpuw::runtime::detail {

enum Q : int { kL = 0, kC = 1, kS = 2 };

struct Op {
  isa::Instr instr;
  std::array<int64_t, 3> req{-1, -1, -1};  // must wait for queue q's instruction req[q] to be done
  bool is_matmul = false;
  int32_t tag = 0;                         // caller's label (the network compiler: layer index)
};

class Builder {
 public:
  explicit Builder(size_t num_resources) : res_(num_resources) {}

  void emit(Q q, isa::Instr instr, const std::vector<size_t>& reads, const std::vector<size_t>& writes,
            bool is_matmul = false);
  /// Queue that last wrote the resource (-1: none yet).
  int last_writer_queue(size_t resource) const { return res_[resource].last_writer_q; }
  /// Emits one COMPUTE NOP that takes over, as a writer, every resource in `resources` whose last
  /// writer or a pending reader is on the STORE queue, so that a later LOAD touching them orders
  /// behind the STORE through the COMPUTE queue. Returns whether a NOP was emitted.
  bool bridge(const std::vector<size_t>& resources);
  void set_tag(int32_t tag) { tag_ = tag; }
  std::array<std::vector<Op>, 3>& ops() { return ops_; }

 private:
  struct Resource {
    int last_writer_q = -1;
    int64_t last_writer = -1;
    std::array<int64_t, 3> readers{-1, -1, -1};
  };
  std::vector<Resource> res_;
  std::array<std::vector<Op>, 3> ops_;
  int32_t tag_ = 0;
};

/// The merged program.
struct MergedProgram {
  std::vector<isa::Word> code;
  std::vector<uint8_t> queue;        // per instruction: Q
  std::vector<int32_t> tag;          // per instruction: Op::tag
  std::vector<uint64_t> fold_index;  // program index of every MATMUL, increasing
  uint64_t loads = 0, loadws = 0, matmuls = 0, stores = 0;
};

/// Assigns tokens (step 2) and merges (step 3). Throws Error(kInternal) if an invariant fails.
MergedProgram merge_program(Builder& builder, uint64_t lookahead, int64_t free_slack);

/// Moves a merged program's code, MATMUL fold index and instruction counts into a compiled-program
/// struct (GemmProgram, ConvProgram, ...: any with those fields).
template <class Program>
void take_merged(MergedProgram&& merged, Program& prog) {
  prog.code = std::move(merged.code);
  prog.fold_index = std::move(merged.fold_index);
  prog.loads = merged.loads;
  prog.loadws = merged.loadws;
  prog.matmuls = merged.matmuls;
  prog.stores = merged.stores;
}

/// One DMA transfer of `bytes` contiguous host bytes into/out of consecutive local rows, split into
/// as few LOAD/STORE instructions as the field widths allow, host rows of at most 4 KiB.
struct Transfer {
  uint64_t local_row;
  uint64_t host_addr;
  uint64_t rows;
  uint64_t row_bytes;
  uint64_t host_stride;
};
std::vector<Transfer> split_transfer(uint64_t local_row, uint64_t host_addr, uint64_t bytes, uint64_t local_row_bytes,
                                     uint64_t beat);
isa::Instr dma_instr(spec::Opcode op, spec::Mem mem, const Transfer& t);

constexpr uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }
constexpr uint64_t round_down(uint64_t x, uint64_t m) { return x / m * m; }
constexpr uint64_t kMaxRowsField = 0xFFFF;
constexpr uint64_t kMaxHostRow = 4096;  // bytes per DMA host row: one 4 KiB page = one burst

/// The driver progress callback of a compiled program: reports to `report` the fraction of
/// `fold_index` (program index of every MATMUL, increasing) the device has fetched since this call
/// (the program is submitted next). Empty when `report` is.
ProgressFn fold_progress(Device& device, const std::vector<uint64_t>& fold_index,
                         const std::function<void(double)>& report);

/// Clears the PERF counters, submits `code` and waits for its fence; returns the host wall time of
/// the run in seconds. `device.perf()` then holds the program's own figures.
double submit_and_wait(Device& device, const std::vector<isa::Word>& code);

}  // namespace tpuw::runtime::detail
