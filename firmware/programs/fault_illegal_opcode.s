; Fault demonstration (any array size): the third instruction has the undefined opcode 0xff.
; The command processor decodes it, dispatches nothing from it on, lets the earlier
; instructions finish (so the first FENCE still writes 7 to 0x4000), then stops with
;   STATUS.FAULT = 1, FAULT_CAUSE = ILLEGAL_OPCODE (1), FAULT_INFO = 0xff,
;   FAULT_PC = address of instruction 2, IRQ_STATUS.FAULT = 1.
; The last FENCE is never executed: 0x4004 keeps 0.
.zero   done  0x4000   8
.expect done  0x4000   int32   7 0
.expect_fault ILLEGAL_OPCODE 0xff 2

        nop
        fence  value=7 host_addr=0x4000
        .word  0x000000ff 0x00000000 0x00000000 0x00000000   ; opcode 0xff: not defined
        fence  value=8 host_addr=0x4004 irq
