; Fault demonstration on the 4x4 configuration (UB_DEPTH = 2048 rows): a MATMUL that reads
; UB rows 2040..2055 runs past the end of the unified buffer. Validation rejects it before
; dispatch with FAULT_CAUSE = LOCAL_RANGE (3), FAULT_INFO = 2048 (the first row out of range),
; FAULT_PC = address of instruction 1. Nothing is written to host memory.
.array_n 4
.zero   done  0x4000   4
.expect done  0x4000   int32   0
.expect_fault LOCAL_RANGE 2048 1

        nop
        matmul ub_addr=2040 acc_addr=0 rows=16
        fence  value=1 host_addr=0x4000 irq
