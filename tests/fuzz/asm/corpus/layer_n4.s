; One quantized layer on a 4x4 array: Y = relu(requant(A * W + bias)) as int8, with a
; per-column multiplier and shift:  y[j] = sat8(max(0, ((x[j] + bias[j]) * mult[j]
; + 2^(shift[j]-1)) >> shift[j]))   (no rounding term when shift[j] = 0).
;
;   A, W as in gemm_n4.s, so A*W = [-3 -2 -1 30; -3 -2 -1 70; 3 2 1 -30; 1 2 1 -2]
;   bias  = [10 -10   0  5]
;   mult  = [ 1   3 100 10]
;   shift = [ 0   1   4  2]
;
;   column 0: x+bias = 7 7 13 11, *1, no shift                 -> 7 7 13 11
;   column 1: x+bias = -12 -12 -8 -8, *3 = -36 -36 -24 -24,
;             (p+1)>>1 = -18 -18 -12 -12, ReLU                 -> 0 0 0 0
;   column 2: x+bias = -1 -1 1 1, *100, (p+8)>>4 = -6 -6 6 6,
;             ReLU                                             -> 0 0 6 6
;   column 3: x+bias = 35 75 -25 3, *10, (p+2)>>2 = 88 188 -62 8,
;             ReLU, saturate to 127                            -> 88 127 0 8
;
;   Y = [ 7 0 0  88]
;       [ 7 0 0 127]
;       [13 0 6   0]
;       [11 0 6   8]
.array_n 4
.int8   a     0x1000   1 2 3 4   5 6 7 8   -1 -2 -3 -4   0 1 0 -1
.int8   w     0x2000   1 0 0 1   0 1 0 2   0 0 1 3   -1 -1 -1 4
; ACC rows 8 (bias), 9 (mult), 10 (shift): three 16-byte int32 rows, contiguous
.int32  qp    0x2100   10 -10 0 5   1 3 100 10   0 1 4 2
.zero   y     0x3000   16
.zero   done  0x4000   4
.dump   y     0x3000   16  int8 4
.expect y     0x3000   int8    7 0 0 88   7 0 0 127   13 0 6 0   11 0 6 8
.expect done  0x4000   int32   2

        load     mem=UB  local_addr=0 host_addr=0x1000 rows=1 row_bytes=16 host_stride=16
        load     mem=WB  local_addr=0 host_addr=0x2000 rows=1 row_bytes=16 host_stride=16
        load     mem=ACC local_addr=8 host_addr=0x2100 rows=1 row_bytes=48 host_stride=48 push_next
        loadw    wb_addr=0                                                     pop_prev
        matmul   ub_addr=0 acc_addr=0 rows=4 swap
        activate acc_addr=0 ub_addr=8 rows=4 bias bias_addr=8 qparam_addr=9 relu push_next
        store    mem=UB  local_addr=8 host_addr=0x3000 rows=1 row_bytes=16 host_stride=16 pop_prev
        fence    value=2 host_addr=0x4000 irq
