#!/usr/bin/python3
"""Writes the seed corpus of tests/fuzz/fuzz_serial.cpp: well-formed board sessions (the ops the
target runs, 0xFF, then the board's responses in order), plus a few with the protocol's errors
(NACK, bad checksum, wrong sequence number) that the backend must retry. Run from anywhere:
  tests/fuzz/serial/make_seeds.py  -> tests/fuzz/serial/corpus/*.bin"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
MAGIC = 0x42555054


def crc8(data):
    c = 0
    for b in data:
        c ^= b
        for _ in range(8):
            c = ((c << 1) ^ 0x07) & 0xFF if c & 0x80 else (c << 1) & 0xFF
    return c


def rsp(seq, payload=b"", code=0, status=0, corrupt=False):
    body = bytes([code, seq & 0xFF, status]) + payload
    c = crc8(body) ^ (0x55 if corrupt else 0)
    return bytes([0x5A]) + body + bytes([c])


class Session:
    def __init__(self, mem=65536, clock=12_000_000):
        self.seq = 1
        self.out = b""
        self.mem = mem
        self.ok(struct.pack("<IIII", MAGIC, mem, clock, (1 << 24) | 104))  # INFO

    def ok(self, payload=b"", status=0):
        self.out += rsp(self.seq, payload, status=status)
        self.seq += 1

    def word(self, value=0):
        self.ok(struct.pack("<I", value))


def write(name, ops, s):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes(ops) + b"\xff" + s.out)


def main():
    os.makedirs(OUT, exist_ok=True)
    s = Session()
    write("connect.bin", [], s)

    # read_reg, write_reg, mem_read (op 2: 11 bytes at 74 = words 72..84), wait_irq (irq high),
    # read FAULT_INFO.
    s = Session()
    s.word(0x11)          # op 0x00 read STATUS
    s.ok()                # op 0x01 write IRQ_ENABLE
    s.ok(bytes(range(16)))  # op 0x02 MEM_READ 4 words
    s.ok(status=1)        # op 0x04 STATUS poll, irq high
    s.word(0x2A)          # op 0x06 read FAULT_INFO
    write("regs_mem_irq.bin", [0x00, 0x01, 0x02, 0x04, 0x06], s)

    # op 0x03: 7 bytes at 111 (head RMW of word 108, one word at 112, tail RMW of word 116).
    s = Session()
    s.word(0); s.ok(); s.ok(); s.word(0); s.ok()
    write("mem_write_unaligned.bin", [0x03], s)

    # op 0x05: reset (CTRL write, CTRL read back 0, three register writes).
    s = Session()
    s.ok(); s.word(0); s.ok(); s.ok(); s.ok()
    write("reset.bin", [0x05], s)

    # op 0x07: 1100 bytes from 0 = 275 words in two frames (256 + 19).
    s = Session()
    s.ok(bytes(1024)); s.ok(bytes(76))
    write("mem_read_two_frames.bin", [0x07], s)

    # 0x80: switch to 921600 baud after INFO (SET_BAUD, STATUS), then read STATUS (0x80 & 7 = 0).
    s = Session()
    s.ok(); s.ok(); s.word(0)
    write("set_baud.bin", [0x80], s)

    # wait_irq with the line low for a few polls, then high.
    s = Session()
    s.ok(); s.ok(); s.ok(status=1)
    write("irq_after_polls.bin", [0x04], s)

    # Protocol errors the backend retries: NACK, bad response checksum, wrong sequence number.
    s = Session()
    s.out += rsp(s.seq, code=1)  # NACK of REG_READ
    s.word(7)
    write("nack_retry.bin", [0x00], s)
    s = Session()
    s.out += rsp(s.seq, struct.pack("<I", 7), corrupt=True)
    s.word(7)
    write("bad_crc_retry.bin", [0x00], s)
    s = Session()
    s.out += rsp(s.seq + 5, struct.pack("<I", 7))
    s.word(7)
    write("wrong_seq_retry.bin", [0x00], s)
    # The board rejects a request (RANGE) and answers noise before a sync byte.
    s = Session()
    s.out += b"\x00\x13\x37" + rsp(s.seq, code=3)
    write("range_reject.bin", [0x02], s)
    # Not a TPU Worker bridge (wrong magic), and an implausible INFO (clock 0).
    with open(os.path.join(OUT, "wrong_magic.bin"), "wb") as f:
        f.write(b"\xff" + rsp(1, struct.pack("<IIII", 0x12345678, 4096, 12_000_000, 0)))
    with open(os.path.join(OUT, "clock_zero.bin"), "wb") as f:
        f.write(b"\xff" + rsp(1, struct.pack("<IIII", MAGIC, 4096, 0, 0)))


if __name__ == "__main__":
    main()
