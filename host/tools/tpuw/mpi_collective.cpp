// MPI collective for mirrored training (mpi_collective.h).
#include "mpi_collective.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tpuw/error.h"

#if TPUW_WITH_MPI
#include <mpi.h>
#endif

namespace tpuw::cli {

std::vector<uint8_t> pack_rank(const nlohmann::ordered_json& head, std::span<const uint8_t> bytes) {
  const std::string h = head.dump();
  std::vector<uint8_t> out(8 + h.size() + bytes.size());
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, h.data(), h.size());
  if (!bytes.empty()) std::memcpy(out.data() + 8 + h.size(), bytes.data(), bytes.size());
  return out;
}

std::pair<nlohmann::ordered_json, std::span<const uint8_t>> unpack_rank(const std::vector<uint8_t>& msg, size_t rank) {
  uint64_t n = 0;
  if (msg.size() < 8 || (std::memcpy(&n, msg.data(), 8), n > msg.size() - 8)) {
    throw Error(ErrorKind::kInternal, fmt::format("MPI: the message of rank {} is malformed ({} bytes)", rank, msg.size()));
  }
  nlohmann::ordered_json head =
      nlohmann::ordered_json::parse(std::string_view(reinterpret_cast<const char*>(msg.data()) + 8, n));
  return {std::move(head), std::span<const uint8_t>(msg.data() + 8 + n, msg.size() - 8 - n)};
}

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && std::atoi(s) > 1) return true;
  }
  return false;
}

#if TPUW_WITH_MPI

bool mpi_built() { return true; }

namespace {

class MpiCollective final : public worker::Collective {
 public:
  explicit MpiCollective(double timeout) : timeout_(timeout) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiCollective() override {
    if (timed_out_) {
      MPI_Abort(MPI_COMM_WORLD, 5);  // the others may be waiting in a collective: end the job
    } else {
      MPI_Finalize();
    }
  }
  MpiCollective(const MpiCollective&) = delete;
  MpiCollective& operator=(const MpiCollective&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::vector<uint8_t>> allgather(std::span<const uint8_t> mine) override {
    const auto P = static_cast<size_t>(size_);
    uint64_t n = mine.size();
    std::vector<uint64_t> sizes(P);
    MPI_Request req;
    MPI_Iallgather(&n, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &req);
    wait(req, "sizes");
    std::vector<int> counts(P), displs(P);
    uint64_t total = 0;
    for (size_t r = 0; r < P; ++r) {
      if (sizes[r] > INT32_MAX || total > INT32_MAX - sizes[r]) {
        throw Error(ErrorKind::kUnsupported, fmt::format("MPI allgather: {} bytes from rank {} exceed 2 GiB", sizes[r], r));
      }
      counts[r] = static_cast<int>(sizes[r]);
      displs[r] = static_cast<int>(total);
      total += sizes[r];
    }
    std::vector<uint8_t> all(total);
    MPI_Iallgatherv(mine.data(), static_cast<int>(n), MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE,
                    MPI_COMM_WORLD, &req);
    wait(req, "data");
    std::vector<std::vector<uint8_t>> out(P);
    for (size_t r = 0; r < P; ++r) {
      out[r].assign(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
    }
    return out;
  }

 private:
  void wait(MPI_Request& req, const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      int done = 0;
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done != 0) return;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_) {
        timed_out_ = true;
        throw Error(ErrorKind::kTimeout,
                    fmt::format("MPI allgather ({}): not every one of the {} ranks answered within {} s (a rank "
                                "failed or exited); this is rank {}",
                                what, size_, timeout_, rank_));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  double timeout_;
  int rank_ = 0, size_ = 1;
  bool timed_out_ = false;
};

}  // namespace

std::unique_ptr<worker::Collective> open_mpi(double timeout_seconds) {
  return std::make_unique<MpiCollective>(timeout_seconds);
}

#else

bool mpi_built() { return false; }

std::unique_ptr<worker::Collective> open_mpi(double) {
  throw Error(ErrorKind::kUnsupported, "this tpuw was built without MPI (CMake did not find it)");
}

#endif

}  // namespace tpuw::cli
