// The event loop of the reference model (no RTL block: it stands for the clock) and the
// busy-cycle accounting behind PERF_CYCLES.
//
// Execution is a discrete-event simulation with four kinds of events: the command processor
// dispatching the instruction at RING_HEAD (or detecting a fault there), a queue head issuing to
// its engine, a FENCE completing, and a pending fault being raised after the drain. Each event
// has a time computed from the engines' timelines; the earliest one runs next, so functional
// effects happen in modelled-time order and run(max_cycles) stops exactly at its horizon. Every
// event only creates later events, so the order is well defined. A program whose tokens never
// arrive leaves no event to run: the model makes no progress, as the device does.
#include "ref_impl.h"

#include <algorithm>

namespace tpuw::ref {

std::pair<RefDevice::Impl::Ev, uint64_t> RefDevice::Impl::next_event() {
  Ev best = Ev::kNone;
  uint64_t bt = kNever;
  for (size_t qi = 0; qi < 3; ++qi) {
    const uint64_t t = issue_time(qi);
    if (t < bt) {
      bt = t;
      best = static_cast<Ev>(static_cast<int>(Ev::kIssueLoad) + static_cast<int>(qi));
    }
  }
  const uint64_t td = dispatch_time();
  if (td < bt) {
    bt = td;
    best = Ev::kDispatch;
  }
  const uint64_t tf = fault_raise_time();
  if (tf < bt) {
    bt = tf;
    best = Ev::kRaiseFault;
  }
  return {best, bt};
}

void RefDevice::Impl::settle_busy() {
  if (busy_since && !busy()) {
    const uint64_t end = std::max(*busy_since, std::min(now, max_done()));
    perf[kPerfCycles] += end - *busy_since;
    busy_since.reset();
  }
}

uint64_t RefDevice::Impl::run(uint64_t max_cycles) {
  if (hang) {  // time passes, nothing happens
    const uint64_t idle = std::min(max_cycles, kNever - now);
    now += idle;
    return idle;
  }
  if (irq_line()) return 0;
  const uint64_t start = now;
  const uint64_t horizon = max_cycles > kNever - now ? kNever : now + max_cycles;
  for (;;) {
    const auto [ev, t] = next_event();
    if (ev == Ev::kNone || t > horizon) {
      now = horizon;
      break;
    }
    now = std::max(now, t);
    switch (ev) {
      case Ev::kIssueLoad: do_issue(kQLoad, now); break;
      case Ev::kIssueCompute: do_issue(kQCompute, now); break;
      case Ev::kIssueStore: do_issue(kQStore, now); break;
      case Ev::kDispatch: do_dispatch(now); break;
      case Ev::kRaiseFault: do_raise_fault(now); break;
      case Ev::kNone: break;
    }
    if (irq_line()) break;
  }
  settle_busy();
  return now - start;
}

}  // namespace tpuw::ref
