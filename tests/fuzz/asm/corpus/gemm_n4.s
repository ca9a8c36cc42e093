; Single-tile GEMM on a 4x4 array: C = A * W, A and W 4x4 int8, C 4x4 int32.
;
;   A = [ 1  2  3  4]      W = [ 1  0  0  1]      C = [-3 -2 -1  30]
;       [ 5  6  7  8]          [ 0  1  0  2]          [-3 -2 -1  70]
;       [-1 -2 -3 -4]          [ 0  0  1  3]          [ 3  2  1 -30]
;       [ 0  1  0 -1]          [-1 -1 -1  4]          [ 1  2  1  -2]
;
; Row i of A enters the array as activation row i; W row k holds the weights that multiply
; activation element k, so C[i][n] = sum_k A[i][k] * W[k][n].
.array_n 4
.int8   a     0x1000   1 2 3 4   5 6 7 8   -1 -2 -3 -4   0 1 0 -1
.int8   w     0x2000   1 0 0 1   0 1 0 2   0 0 1 3   -1 -1 -1 4
.zero   c     0x3000   64
.zero   done  0x4000   4
.dump   c     0x3000   64  int32 4
.expect c     0x3000   int32   -3 -2 -1 30   -3 -2 -1 70   3 2 1 -30   1 2 1 -2
.expect done  0x4000   int32   1

        load   mem=UB  local_addr=0 host_addr=0x1000 rows=1 row_bytes=16 host_stride=16
        load   mem=WB  local_addr=0 host_addr=0x2000 rows=1 row_bytes=16 host_stride=16 push_next
        loadw  wb_addr=0                                  pop_prev   ; both loads are done
        matmul ub_addr=0 acc_addr=0 rows=4 swap           push_next  ; C -> ACC rows 0..3
        store  mem=ACC local_addr=0 host_addr=0x3000 rows=4 row_bytes=16 host_stride=16 pop_prev
        fence  value=1 host_addr=0x4000 irq
