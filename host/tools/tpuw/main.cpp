// tpuw: the command-line tool of TPU Worker (device info, assembler, program runner, GEMM, models).
// info, gemm and run take --devices K (and gemm/run --strategy): K devices behind one runtime
// (tpuw/worker/strategies.h), with each device's busy time and the overlap in the report.
//
// Exit codes: 0 ok, 2 bad input or usage, 3 result mismatch (--check, .expect) or a training whose
// loss became NaN/infinite (train), 4 device fault or timeout, 1 anything else (including out of
// memory, threads or disk space).
// `tpuw --version` prints the version of the tool and the ISA it was built against.
//
// One file per subcommand: cmd_info, cmd_asm, cmd_disasm, cmd_exec, cmd_gemm, cmd_run, cmd_train; the
// options and reports they share are in cli_common. This file sets up the app, registers the
// subcommands, and maps errors to exit codes.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <new>

#include "cli_common.h"
#include "cmd_asm.h"
#include "cmd_disasm.h"
#include "cmd_exec.h"
#include "cmd_gemm.h"
#include "cmd_info.h"
#include "cmd_run.h"
#include "cmd_train.h"
#include "tpuw/error.h"
#include "tpuw/spec.h"

namespace tpuw::cli {
namespace {

int run(int argc, char** argv) {
  CLI::App app{"tpuw: TPU Worker device tool (info, asm, disasm, exec, gemm, run, train).\n"
               "Exit codes: 0 ok, 2 bad input/usage, 3 mismatch or diverged training, 4 device fault/timeout,\n"
               "1 other (runtime failure, out of memory/threads/disk)."};
  app.set_version_flag("--version", version_string(), "print the tool and ISA version and exit");
  app.require_subcommand(1);

  // Registered in this order, which is the order `tpuw --help` lists them in.
  const InfoCommand info(app);
  const AsmCommand as(app);
  const DisasmCommand dis(app);
  const ExecCommand ex(app);
  const GemmCommand ge(app);
  const RunCommand run_cmd(app);
  const TrainCommand train(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kBadInput;
  }

  if (info.selected()) return info.execute();
  if (as.selected()) return as.execute();
  if (dis.selected()) return dis.execute();
  if (ex.selected()) return ex.execute();
  if (ge.selected()) return ge.execute();
  if (run_cmd.selected()) return run_cmd.execute();
  if (train.selected()) return train.execute();
  return kBadInput;
}

}  // namespace
}  // namespace tpuw::cli

int main(int argc, char** argv) {
  // Past `ulimit -f` a write fails with EFBIG (reported, the output file left as it was) instead
  // of the default SIGXFSZ killing the process; a SIGBUS of the FST writer is reported and its
  // staged files removed (cli_common.h).
  tpuw::cli::install_signal_handlers();
  try {
    return tpuw::cli::run(argc, argv);
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "tpuw: error: out of memory (lower the sizes, batch or device count, or raise the "
                       "process memory limit)\n");
    return tpuw::cli::kOther;
  } catch (const tpuw::Error& e) {
    fmt::print(stderr, "tpuw: error: {}\n", e.what());
    return tpuw::cli::exit_code(e.kind());
  } catch (const std::exception& e) {
    fmt::print(stderr, "tpuw: error: {}\n", e.what());
    return tpuw::cli::kOther;
  }
}
