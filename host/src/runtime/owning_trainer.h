// A Trainer that owns the Device its inner trainer drives (private to the runtime library).
// make_device_trainer and make_cnn_trainer open a device for the CLI and hand back one object;
// the inner trainers (DeviceTrainer, CnnTrainer) only borrow a device, so this wrapper keeps it
// alive next to them and forwards the Trainer interface.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/runtime/trainer.h"

namespace tpuw::runtime {

template <class Inner>
class OwningTrainer final : public Trainer {
 public:
  // `make(device)` builds the inner trainer on the owned device (returned by value: no move needed).
  template <class Make>
  OwningTrainer(Device device, Make make) : device_(std::move(device)), trainer_(make(device_)) {}

  TrainStepReport step(std::span<const float> inputs, std::span<const int64_t> labels, int64_t rows) override {
    return trainer_.step(inputs, labels, rows);
  }
  std::vector<float> logits(std::span<const float> inputs, int64_t rows) override {
    return trainer_.logits(inputs, rows);
  }
  TrainState state() const override { return trainer_.state(); }
  void load_state(const TrainState& s) override { trainer_.load_state(s); }
  int64_t batch() const override { return trainer_.batch(); }
  int64_t classes() const override { return trainer_.classes(); }
  std::string name() const override { return trainer_.name(); }

 private:
  Device device_;  // declared first: constructed before, destroyed after, the trainer that uses it
  Inner trainer_;
};

}  // namespace tpuw::runtime
