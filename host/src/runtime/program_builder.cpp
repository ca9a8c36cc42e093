// Token derivation and program merge shared by the GEMM and network compilers
// (see program_builder.h for the method).
#include "program_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string_view>

#include "tpuw/error.h"

namespace tpuw::runtime::detail {

void Builder::emit(Q q, isa::Instr instr, const std::vector<size_t>& reads, const std::vector<size_t>& writes,
                   bool is_matmul) {
  Op op;
  op.instr = std::move(instr);
  op.is_matmul = is_matmul;
  op.tag = tag_;
  const auto idx = static_cast<int64_t>(ops_[q].size());
  for (size_t r : reads) {
    Resource& s = res_[r];
    if (s.last_writer_q >= 0 && s.last_writer_q != q) {
      op.req[s.last_writer_q] = std::max(op.req[s.last_writer_q], s.last_writer);
    }
    s.readers[q] = idx;
  }
  for (size_t r : writes) {
    Resource& s = res_[r];
    for (int p = 0; p < 3; ++p) {
      if (p != q && s.readers[p] >= 0) op.req[p] = std::max(op.req[p], s.readers[p]);
    }
    if (s.last_writer_q >= 0 && s.last_writer_q != q) {
      op.req[s.last_writer_q] = std::max(op.req[s.last_writer_q], s.last_writer);
    }
    s.last_writer_q = q;
    s.last_writer = idx;
    s.readers = {-1, -1, -1};
  }
  for (int p = 0; p < 3; ++p) {
    if (op.req[p] >= 0 && std::abs(p - static_cast<int>(q)) != 1) {
      throw Error(ErrorKind::kInternal,
                  fmt::format("program builder: dependency between non-adjacent queues ({} on {}, instruction {})",
                              static_cast<int>(q), p, idx));
    }
  }
  ops_[q].push_back(std::move(op));
}

bool Builder::bridge(const std::vector<size_t>& resources) {
  std::vector<size_t> take;
  for (size_t r : resources) {
    if (res_[r].last_writer_q == kS || res_[r].readers[kS] >= 0) take.push_back(r);
  }
  if (take.empty()) return false;
  emit(kC, isa::make_instr(spec::Opcode::kNop), {}, take);
  return true;
}

namespace {

// Token channel between producer queue P and consumer queue Q. Sets pop flags on consumers and
// push flags on producers; returns for each consumer op the producer index its pop is matched
// with (-1 = no pop). `latest_push(j, need)` may move the push later than `need`.
template <typename Later>
std::vector<int64_t> assign_channel(std::vector<Op>& producers, std::vector<Op>& consumers, Q p, bool pop_is_prev,
                                    bool push_is_prev, Later latest_push) {
  std::vector<int64_t> partner(consumers.size(), -1);
  int64_t guaranteed = -1;
  int64_t need = -1;
  for (size_t j = 0; j < consumers.size(); ++j) {
    need = std::max(need, consumers[j].req[p]);
    if (need <= guaranteed) continue;
    int64_t at = std::max(need, latest_push(j, need));
    at = std::min<int64_t>(at, static_cast<int64_t>(producers.size()) - 1);
    if (at <= guaranteed) at = need;
    isa::Instr& c = consumers[j].instr;
    if (pop_is_prev) c.pop_prev = true; else c.pop_next = true;
    isa::Instr& pr = producers[static_cast<size_t>(at)].instr;
    if (push_is_prev) pr.push_prev = true; else pr.push_next = true;
    partner[j] = at;
    guaranteed = at;
  }
  return partner;
}

}  // namespace

MergedProgram merge_program(Builder& b, uint64_t lookahead, int64_t free_slack) {
  auto& ops = b.ops();
  std::vector<Op>& L = ops[kL];
  std::vector<Op>& C = ops[kC];
  std::vector<Op>& S = ops[kS];

  // First compute consumer of every load (from the running maximum of the compute requirements).
  std::vector<int64_t> first_use(L.size(), static_cast<int64_t>(C.size()));
  {
    int64_t covered = -1;
    for (size_t i = 0; i < C.size(); ++i) {
      while (covered < C[i].req[kL]) first_use[static_cast<size_t>(++covered)] = static_cast<int64_t>(i);
    }
  }
  const auto no_delay = [](size_t, int64_t need) { return need; };
  const std::vector<int64_t> l_pop = assign_channel(C, L, kC, /*pop_is_prev=*/false, /*push_is_prev=*/true,
                                                    [&](size_t j, int64_t need) {
                                                      return std::max(need, first_use[j] - free_slack);
                                                    });
  const std::vector<int64_t> c_pop_l = assign_channel(L, C, kL, true, false, no_delay);
  const std::vector<int64_t> c_pop_s = assign_channel(S, C, kS, false, true, no_delay);
  const std::vector<int64_t> s_pop = assign_channel(C, S, kC, true, false, no_delay);

  MergedProgram prog;
  const size_t total = L.size() + C.size() + S.size();
  prog.code.reserve(total);
  prog.queue.reserve(total);
  prog.tag.reserve(total);
  auto put = [&](const Op& op, Q q) {
    prog.code.push_back(isa::encode(op.instr));
    prog.queue.push_back(static_cast<uint8_t>(q));
    prog.tag.push_back(op.tag);
  };
  int64_t emitted_c = -1, emitted_l = -1, emitted_s = -1;
  size_t li = 0, si = 0;
  auto emit_loads_before = [&](int64_t i) {
    while (li < L.size() && first_use[li] <= i + static_cast<int64_t>(lookahead) && l_pop[li] <= emitted_c) {
      put(L[li], kL);
      ++prog.loads;
      emitted_l = static_cast<int64_t>(li++);
    }
  };
  auto emit_stores = [&] {
    while (si < S.size() && s_pop[si] <= emitted_c) {
      put(S[si], kS);
      ++prog.stores;
      emitted_s = static_cast<int64_t>(si++);
    }
  };
  for (size_t i = 0; i < C.size(); ++i) {
    emit_loads_before(static_cast<int64_t>(i));
    if (c_pop_l[i] > emitted_l || c_pop_s[i] > emitted_s) {
      throw Error(ErrorKind::kInternal, "program builder: a pop precedes its push in program order");
    }
    const auto op = static_cast<spec::Opcode>(C[i].instr.opcode);
    if (C[i].is_matmul) {
      prog.fold_index.push_back(prog.code.size());
      ++prog.matmuls;
    } else if (op == spec::Opcode::kLoadw) {
      ++prog.loadws;
    }
    put(C[i], kC);
    emitted_c = static_cast<int64_t>(i);
    emit_stores();
  }
  // Loads nothing on the compute queue consumes (none today) would be left; place them last.
  emit_loads_before(static_cast<int64_t>(C.size()) + 1);
  if (li != L.size() || si != S.size()) {
    throw Error(ErrorKind::kInternal, "program builder: instructions left over after the merge");
  }
  return prog;
}

std::vector<Transfer> split_transfer(uint64_t local_row, uint64_t host_addr, uint64_t bytes, uint64_t local_row_bytes,
                                     uint64_t beat) {
  const uint64_t unit = std::lcm(local_row_bytes, beat);
  if (bytes % unit != 0 || unit > 0xFFFF) {
    throw Error(ErrorKind::kInternal,
                fmt::format("program builder: transfer of {} bytes is not a multiple of {}", bytes, unit));
  }
  const uint64_t count = bytes / unit;
  uint64_t d = std::max<uint64_t>(1, std::min(count, kMaxHostRow / unit));
  while (count % d != 0) --d;
  const uint64_t row_bytes = unit * d;
  uint64_t rows_left = count / d;
  std::vector<Transfer> out;
  while (rows_left > 0) {
    const uint64_t rows = std::min(rows_left, kMaxRowsField);
    out.push_back({local_row, host_addr, rows, row_bytes, row_bytes});
    local_row += rows * row_bytes / local_row_bytes;
    host_addr += rows * row_bytes;
    rows_left -= rows;
  }
  return out;
}

isa::Instr dma_instr(spec::Opcode op, spec::Mem mem, const Transfer& t) {
  isa::Instr i = isa::make_instr(op);
  i.set("mem", static_cast<uint64_t>(mem));
  i.set("local_addr", t.local_row);
  i.set("host_addr", t.host_addr);
  i.set("rows", t.rows);
  i.set("row_bytes", t.row_bytes);
  i.set("host_stride", t.host_stride);
  return i;
}

ProgressFn fold_progress(Device& device, const std::vector<uint64_t>& fold_index,
                         const std::function<void(double)>& report) {
  if (!report) return {};
  const uint64_t base = device.instructions_submitted();
  return [&device, &fold_index, report, base] {
    const uint64_t consumed = device.instructions_consumed() - base;
    const auto done = std::lower_bound(fold_index.begin(), fold_index.end(), consumed) - fold_index.begin();
    report(fold_index.empty() ? 1.0 : static_cast<double>(done) / static_cast<double>(fold_index.size()));
  };
}

double submit_and_wait(Device& device, const std::vector<isa::Word>& code) {
  device.clear_perf();
  const auto t0 = std::chrono::steady_clock::now();
  device.wait(device.submit(code));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tpuw::runtime::detail
