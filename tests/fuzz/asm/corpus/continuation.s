matmul ub_addr=0 acc_addr=0 rows=4 swap \
  pop_prev
; comment
.array_n 4
.expect_fault ILLEGAL_OPCODE 0xee 1
