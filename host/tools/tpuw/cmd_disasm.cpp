// tpuw disasm (cmd_disasm.h).
#include "cmd_disasm.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "cli_common.h"
#include "tpuw/asm.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/spec.h"

namespace tpuw::cli {

struct DisasmOpts {
  std::string in;
};

namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_file(const fs::path& p) {
  return read_file_bounded(p, uint64_t{256} << 20, "a file of raw instructions");
}


int cmd_disasm(const std::string& in) {
  const std::vector<uint8_t> bytes = read_file(in);
  if (bytes.size() % spec::kInstrBytes != 0) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: {} bytes is not a whole number of {}-byte instructions", in,
                                                 bytes.size(), spec::kInstrBytes));
  }
  for (size_t i = 0; i < bytes.size() / spec::kInstrBytes; ++i) {
    const isa::Word w = isa::word_from(std::span<const uint8_t>(bytes).subspan(i * spec::kInstrBytes));
    fmt::print("{:<60} ; {}\n", isa::disassemble_one(w), i);
  }
  return kOk;
}

}  // namespace

DisasmCommand::DisasmCommand(CLI::App& app) : opts_(std::make_shared<DisasmOpts>()) {
  std::string& dis_in = opts_->in;
  auto* dis = app.add_subcommand("disasm", "disassemble raw instructions");
  dis->add_option("IN", dis_in, "binary file (a multiple of 16 bytes)")->required()->check(CLI::ExistingFile);
  sub_ = dis;
}

bool DisasmCommand::selected() const { return sub_ != nullptr && sub_->parsed(); }

int DisasmCommand::execute() const { return cmd_disasm(opts_->in); }

}  // namespace tpuw::cli
