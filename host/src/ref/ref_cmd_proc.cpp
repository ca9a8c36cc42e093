// The command processor's dispatch side: the three bounded queues, the four dependency-token
// counters and their program-order balance, dispatch and issue times, FENCE and raising a
// fault after the drain. Mirrors tpu_cmd_dispatch and tpu_cmd_proc (rtl/core).
#include "ref_impl.h"

#include <algorithm>
#include <cstring>

namespace tpuw::ref {

// Tokens of a queue: which counters its pop/push flags name.
std::optional<Token> RefDevice::Impl::pop_prev_tok(size_t qi) {
  return qi == kQCompute ? std::optional<Token>(kLd2Cmp) : qi == kQStore ? std::optional<Token>(kCmp2St) : std::nullopt;
}

std::optional<Token> RefDevice::Impl::pop_next_tok(size_t qi) {
  return qi == kQLoad ? std::optional<Token>(kCmp2Ld) : qi == kQCompute ? std::optional<Token>(kSt2Cmp) : std::nullopt;
}

std::optional<Token> RefDevice::Impl::push_prev_tok(size_t qi) {
  return qi == kQCompute ? std::optional<Token>(kCmp2Ld) : qi == kQStore ? std::optional<Token>(kSt2Cmp) : std::nullopt;
}

std::optional<Token> RefDevice::Impl::push_next_tok(size_t qi) {
  return qi == kQLoad ? std::optional<Token>(kLd2Cmp) : qi == kQCompute ? std::optional<Token>(kCmp2St) : std::nullopt;
}

void RefDevice::Impl::count_tokens(const isa::Instr& in, size_t qi) {
  if (in.push_prev) ++token_balance[*push_prev_tok(qi)];
  if (in.push_next) ++token_balance[*push_next_tok(qi)];
  if (in.pop_prev) --token_balance[*pop_prev_tok(qi)];
  if (in.pop_next) --token_balance[*pop_next_tok(qi)];
}

/// Earliest issue time of queue qi's head, or kNever when a token it pops has not been pushed.
uint64_t RefDevice::Impl::issue_time(size_t qi, uint64_t* token_wait) const {
  if (q[qi].empty()) return kNever;
  const Queued& e = q[qi].front();
  const uint64_t base = std::max(e.dispatched + pm.issue_cycles, accept[qi]);
  uint64_t t = base;
  uint64_t ld_tok = 0;
  if (e.in.pop_prev) {
    const auto tok = *pop_prev_tok(qi);
    if (tokens[tok].empty()) return kNever;
    t = std::max(t, tokens[tok].front());
    if (tok == kLd2Cmp) ld_tok = tokens[tok].front();
  }
  if (e.in.pop_next) {
    const auto tok = *pop_next_tok(qi);
    if (tokens[tok].empty()) return kNever;
    t = std::max(t, tokens[tok].front());
  }
  if (token_wait != nullptr) *token_wait = ld_tok > base ? ld_tok - base : 0;
  return t;
}

/// Earliest dispatch (or fault-detection, or fence completion) time of the head, or kNever.
uint64_t RefDevice::Impl::dispatch_time() {
  peek_head();
  if (!head) return kNever;
  uint64_t t = head->avail;
  if (head->fault) return t;
  if (head->queue == static_cast<size_t>(spec::Queue::kCtrl)) {
    if (!queues_empty()) return kNever;
    return fence_done_time(std::max(t, max_done()));
  }
  const size_t qi = head->queue;
  if (q[qi].size() >= p.queue_depth) return kNever;
  const uint64_t k = n_dispatched[qi];
  if (k >= p.queue_depth) t = std::max(t, issue_ring[qi][k % p.queue_depth]);
  return t;
}

uint64_t RefDevice::Impl::fence_done_time(uint64_t drained) const {
  return std::max(drained + pm.fence_overhead, wr_chan_free) + 1 + mc.write_latency;
}

uint64_t RefDevice::Impl::fault_raise_time() const {
  if (!fault_pending || !queues_empty()) return kNever;
  return std::max(fault_detect_time, max_done());
}

void RefDevice::Impl::raise_pending(uint64_t t, const FaultRec& f, uint32_t pc) {
  if (fault_pending || faulted) return;
  fault_pending = f;
  fault_pending_pc = pc;
  fault_detect_time = t;
  head.reset();
}

void RefDevice::Impl::do_dispatch(uint64_t t) {
  Head h = *head;
  head.reset();
  if (h.fault) {
    raise_pending(t, *h.fault, h.pc);
    return;
  }
  cp_time = t;
  if (h.queue == static_cast<size_t>(spec::Queue::kCtrl)) {
    do_fence(t, h);
    if (fault_pending) return;  // RING_HEAD stays on the faulting FENCE
  } else {
    q[h.queue].push_back({h.in, h.pc, t});
    ++n_dispatched[h.queue];
    count_tokens(h.in, h.queue);
  }
  ring_head = ring_size == 0 ? 0 : (ring_head + 1) % ring_size;
  if (ring_head == ring_tail) fetch_burst_left = 0;  // prefetch stops at the tail
}

void RefDevice::Impl::do_fence(uint64_t t, const Head& h) {
  const uint32_t value = static_cast<uint32_t>(h.in.fields[spec::fence::kIdxValue]);
  const uint64_t addr = h.in.fields[spec::fence::kIdxHostAddr];
  perf[kPerfWrBytes] += 4;
  wr_chan_free = std::max(wr_chan_free, t - mc.write_latency);
  if (!dev_in_host(addr, 4)) {
    raise_pending(t, FaultRec{Fault::kAxiError, static_cast<uint32_t>(addr)}, h.pc);
    return;
  }
  std::memcpy(hptr(addr), &value, 4);  // host is little-endian
  fence_value = value;
  if (h.in.fields[spec::fence::kIdxIrq] != 0) irq_status |= spec::reg::kIrqStatusFence;
  ++perf[kPerfInstret];
  for (auto& d : last_done) d = std::max(d, t);
}

void RefDevice::Impl::do_raise_fault(uint64_t t) {
  faulted = true;
  fault_cause = static_cast<uint32_t>(fault_pending->cause);
  fault_info = fault_pending->info;
  fault_pc = fault_pending_pc;
  fault_pending.reset();
  irq_status |= spec::reg::kIrqStatusFault;
  for (auto& d : last_done) d = std::max(d, t);
}

void RefDevice::Impl::do_issue(size_t qi, uint64_t t) {
  uint64_t wait = 0;
  (void)issue_time(qi, &wait);
  Queued e = q[qi].front();
  q[qi].pop_front();
  issue_ring[qi][n_issued[qi] % p.queue_depth] = t;
  ++n_issued[qi];
  if (e.in.pop_prev) tokens[*pop_prev_tok(qi)].pop_front();
  if (e.in.pop_next) tokens[*pop_next_tok(qi)].pop_front();
  if (qi == kQCompute) perf[kPerfDmaWait] += wait;

  uint64_t done = t;
  switch (static_cast<Opcode>(e.in.opcode)) {
    case Opcode::kLoad: done = exec_load(e, t); break;
    case Opcode::kStore: done = exec_store(e, t); break;
    case Opcode::kLoadw: done = exec_loadw(e, t); break;
    case Opcode::kMatmul: done = exec_matmul(e, t); break;
    case Opcode::kActivate: done = exec_activate(e, t); break;
    case Opcode::kNop:
      done = t + 1;
      accept[qi] = t + 1;
      break;
    case Opcode::kFence: break;  // never queued
    case Opcode::kTranspose: done = exec_transpose(e, t); break;
    case Opcode::kVector: done = exec_vector(e, t); break;
  }
  done = std::max(done, last_done[qi]);  // engines report done in acceptance order
  last_done[qi] = done;
  ++perf[kPerfInstret];
  if (e.in.push_prev) tokens[*push_prev_tok(qi)].push_back(done);
  if (e.in.push_next) tokens[*push_next_tok(qi)].push_back(done);
}

}  // namespace tpuw::ref
