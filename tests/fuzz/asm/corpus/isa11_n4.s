; ISA 1.1 on a 4x4 array: bf16 MATMUL, VECTOR (SCALE, AXPY, COLSUM), ACTIVATE bf16 with bias,
; TRANSPOSE bf16. A seed for the assembler fuzzer and a self-checking program (tpuw exec).
;   act = [1 2 3 4] (bf16), W = identity (bf16)  ->  ACC0 = [1 2 3 4] (fp32)
;   ACC1 = SCALE(ACC0, 0.5); ACC2 = AXPY(ACC0, -1, ACC1) = -ACC1; ACC3 = COLSUM(ACC0..2) = ACC0
;   UB pair 2 = bf16(ACC2 + bias ACC0) = [0.5 1 1.5 2]; UB pairs 4.. = its transpose
.array_n 4
.int32  act   0x1000   0x40003F80 0x40804040
.int32  w     0x2000   0x00003F80 0   0x3F800000 0   0 0x00003F80   0 0x3F800000
.zero   acc   0x3000   64
.zero   ubt   0x4000   32
.zero   done  0x5000   4
.expect acc   0x3000   uint32  0x3F800000 0x40000000 0x40400000 0x40800000 \
                               0x3F000000 0x3F800000 0x3FC00000 0x40000000 \
                               0xBF000000 0xBF800000 0xBFC00000 0xC0000000 \
                               0x3F800000 0x40000000 0x40400000 0x40800000
.expect ubt   0x4000   uint32  0x3F00 0  0x3F80 0  0x3FC0 0  0x4000 0
.expect done  0x5000   int32   1

        load      mem=UB local_addr=0 host_addr=0x1000 rows=1 row_bytes=8 host_stride=8
        load      mem=WB local_addr=0 host_addr=0x2000 rows=4 row_bytes=8 host_stride=8 push_next
        loadw     wb_addr=0 bf16                                   pop_prev
        matmul    ub_addr=0 acc_addr=0 rows=1 bf16 swap
        vector    op=SCALE dst_addr=1 a_addr=0 b_addr=0 rows=1 scalar=0.5
        vector    op=AXPY  dst_addr=2 a_addr=0 b_addr=1 rows=1 scalar=-1
        vector    op=COLSUM dst_addr=3 a_addr=0 b_addr=0 rows=3 scalar=0 push_next
        activate  acc_addr=2 ub_addr=2 rows=1 bias bias_addr=0 qparam_addr=0 relu bf16
        transpose src_addr=2 dst_addr=4 rows=1 bf16               push_next
        store     mem=ACC local_addr=0 host_addr=0x3000 rows=4 row_bytes=16 host_stride=16 pop_prev
        store     mem=UB  local_addr=4 host_addr=0x4000 rows=4 row_bytes=8 host_stride=8 pop_prev
        fence     value=1 host_addr=0x5000 irq
