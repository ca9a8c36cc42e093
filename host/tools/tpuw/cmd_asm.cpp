// tpuw asm (cmd_asm.h).
#include "cmd_asm.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "cli_common.h"
#include "tpuw/asm.h"
#include "tpuw/error.h"

namespace tpuw::cli {

struct AsmOpts {
  std::string in, out;
};

namespace {

namespace fs = std::filesystem;

int cmd_asm(const std::string& in, std::string out) {
  if (out.empty()) out = fs::path(in).replace_extension(".bin").string();
  check_output("--output", out);  // before any work (exit 2)
  std::error_code ec1, ec2;
  if (fs::weakly_canonical(out, ec1) == fs::weakly_canonical(in, ec2) && !ec1 && !ec2) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--output {}: the same file as the source", out));
  }
  const isa::Program prog = isa::assemble_file(in);
  write_file(out, prog.code);
  fmt::print("{}: {} instructions ({} bytes) -> {}\n", in, prog.num_instrs(), prog.code.size(), out);
  return kOk;
}

}  // namespace

AsmCommand::AsmCommand(CLI::App& app) : opts_(std::make_shared<AsmOpts>()) {
  std::string& asm_in = opts_->in;
  std::string& asm_out = opts_->out;
  auto* as = app.add_subcommand("asm", "assemble a program (.s) into raw 16-byte instructions");
  as->add_option("IN", asm_in, "assembly source")->required()->check(CLI::ExistingFile);
  as->add_option("-o,--output", asm_out, "output file (default: IN with .bin)");
  sub_ = as;
}

bool AsmCommand::selected() const { return sub_ != nullptr && sub_->parsed(); }

int AsmCommand::execute() const { return cmd_asm(opts_->in, opts_->out); }

}  // namespace tpuw::cli
