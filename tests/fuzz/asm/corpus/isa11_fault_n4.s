; ISA 1.1 decode fault: a bf16 MATMUL needs an even ub_addr (a UB row pair).
.array_n 4
.zero   done  0x5000   4
.expect_fault ILLEGAL_FIELD 16 1
        nop
        matmul    ub_addr=3 acc_addr=0 rows=1 bf16
        vector    op=12 dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=-inf
        transpose src_addr=0 dst_addr=0 rows=5
        fence     value=1 host_addr=0x5000 irq
