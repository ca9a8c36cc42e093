; Single-tile GEMM on a 16x16 array: C = A * W, A and W 16x16 int8 from gemm_n16_a.bin and
; gemm_n16_w.bin (row-major), C 16x16 int32 at 0x3000.
;   A[i][k] = (7i + 3k) mod 17 - 8,  W[k][n] = (5k + 11n) mod 13 - 6
; gen_gemm_n16.py writes the two data files and the .expect block below (C row by row).
; The LOADs move each matrix as one 256-byte host row (16 UB/WB rows); the STORE writes the
; 16 ACC rows (64 bytes each) as 16 host rows.
.array_n 16
.data   a     0x1000   gemm_n16_a.bin
.data   w     0x2000   gemm_n16_w.bin
.zero   c     0x3000   1024
.zero   done  0x4000   4
.dump   c     0x3000   1024  int32 16
.expect c     0x3000   int32 \
         113  -31   98  -46   44  -74   16  -24  -12   13  -14  -28  -55  113  -31   98 \
        -129  -20   50  159  -31   13  -86  -94   80   46   51  -22  -17 -129  -20   50 \
          20  -26   19  -27  -21   -2  -35   23  -49  113  -37   86  -64   20  -26   19 \
         -35  -49  -63  -77   91   51   50  -81    9 -109   -6   58  161  -35  -49  -63 \
         -39   13  -26   26  -52  104  -52  104  -52   26  -26   13  -39  -39   13  -26 \
         161   58   -6 -109    9  -81   50   51   91  -77  -63  -49  -35  161   58   -6 \
         -64   86  -37  113  -49   23  -35   -2  -21  -27   19  -26   20  -64   86  -37 \
         -17  -22   51   46   80  -94  -86   13  -31  159   50  -20 -129  -17  -22   51 \
         -55  -28  -14   13  -12  -24   16  -74   44  -46   98  -31  113  -55  -28  -14 \
          60  -68  -79   14  -36  148   33    9 -119  -13  -24   43   32   60  -68  -79 \
          56   -6  -42 -104   42  -20  152  -27   41  -99  -44   -2   53   56   -6  -42 \
         -50  141   46   16 -118  -18  -35   39   48   70  -64  -81    6  -50  141   46 \
          14   50  151  -34   28 -118  -69   71   55   52  -16  -58 -126   14   50  151 \
        -126  -58  -16   52   55   71  -69 -118   28  -34  151   50   14 -126  -58  -16 \
           6  -81  -64   70   48   39  -35  -18 -118   16   46  141  -50    6  -81  -64 \
          53   -2  -44  -99   41  -27  152  -20   42 -104  -42   -6   56   53   -2  -44
.expect done  0x4000   int32   1

        load   mem=UB  local_addr=0 host_addr=0x1000 rows=1 row_bytes=256 host_stride=256
        load   mem=WB  local_addr=0 host_addr=0x2000 rows=1 row_bytes=256 host_stride=256 push_next
        loadw  wb_addr=0                                   pop_prev
        matmul ub_addr=0 acc_addr=0 rows=16 swap           push_next
        store  mem=ACC local_addr=0 host_addr=0x3000 rows=16 row_bytes=64 host_stride=64 pop_prev
        fence  value=1 host_addr=0x4000 irq
