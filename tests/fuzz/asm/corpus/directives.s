nop
.word 0xee 0 0 0
.int8 a 0x100 1 -2 3
.zero z 0x200 64
.dump z 0x200 64 int32 4
.expect z 0x200 int32 0 0
