# The device configurations the project verilates, in one place. Each entry:
#   ArrayN:UbDepth:WbDepth:AccDepth:DmaDataW:QueueDepth
# The first is the default (N=16, sized so a 512x512x512 GEMM runs at full speed: A stays resident
# in the UB, weight tiles stream through the WB, the ACC double-buffers 512-row output strips).
# The second is the small configuration the tests also build (N=4, narrow 64-bit bus so the DMA
# width converter runs in both directions: a beat holds 2 UB rows, an ACC row takes 2 beats).
# Keep this list short: every entry is a full Verilator build.
set(TPUW_DEVICE_CONFIGS
  "16:32768:4096:4096:128:8"
  "4:2048:512:1024:64:8"
)

# Generate tpuw/device_configs.h so the reference model and the simulation agree with the RTL.
set(_cfg_rows "")
foreach(cfg IN LISTS TPUW_DEVICE_CONFIGS)
  string(REPLACE ":" ";" f "${cfg}")
  list(GET f 0 n)
  list(GET f 1 ub)
  list(GET f 2 wb)
  list(GET f 3 acc)
  list(GET f 4 dw)
  list(GET f 5 qd)
  string(APPEND _cfg_rows "    DeviceParams{${n}, ${ub}, ${wb}, ${acc}, ${dw}, ${qd}},\n")
endforeach()
list(LENGTH TPUW_DEVICE_CONFIGS _cfg_count)
set(TPUW_GENERATED_INCLUDE_DIR ${CMAKE_BINARY_DIR}/generated)
configure_file(${CMAKE_CURRENT_LIST_DIR}/device_configs.h.in
               ${TPUW_GENERATED_INCLUDE_DIR}/tpuw/device_configs.h @ONLY)
