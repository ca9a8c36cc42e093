## Digilent Arty A7-35T (XC7A35T-1CSG324C / -1LI): pins of rtl/fpga/tpu_arty_top.sv.
## Pin names and sites from Digilent's Arty-A7-35-Master.xdc (schematic net in the comment).
## Used with scripts/fpga/xilinx.sh arty's EDIF netlist in Vivado (not available here).

## 100 MHz oscillator (Sch=gclk[100]); the MMCM in the top derives the 50 MHz core clock, whose
## constraint Vivado propagates from this one.
set_property -dict { PACKAGE_PIN E3  IOSTANDARD LVCMOS33 } [get_ports { clk100mhz_i }]
create_clock -add -name sys_clk_pin -period 10.00 -waveform {0 5} [get_ports { clk100mhz_i }]

## RESET button (Sch=ck_rst), low when pressed
set_property -dict { PACKAGE_PIN C2  IOSTANDARD LVCMOS33 } [get_ports { ck_rst_ni }]

## USB-UART (FT2232HQ channel B): uart_txd_in is the PC's TX into the FPGA,
## uart_rxd_out the FPGA's TX to the PC (names from the FTDI's point of view).
set_property -dict { PACKAGE_PIN A9  IOSTANDARD LVCMOS33 } [get_ports { uart_txd_in_i }]
set_property -dict { PACKAGE_PIN D10 IOSTANDARD LVCMOS33 } [get_ports { uart_rxd_out_o }]

## LEDs LD4 (irq) and LD5 (heartbeat)
set_property -dict { PACKAGE_PIN H5  IOSTANDARD LVCMOS33 } [get_ports { led4_o }]
set_property -dict { PACKAGE_PIN J5  IOSTANDARD LVCMOS33 } [get_ports { led5_o }]

## Asynchronous inputs: the top synchronizes the button; the UART receiver oversamples RX.
set_false_path -from [get_ports { ck_rst_ni uart_txd_in_i }]
set_false_path -to   [get_ports { uart_rxd_out_o led4_o led5_o }]

## Configuration bank voltage (Arty: 3.3 V, CFGBVS tied to VCCO)
set_property CONFIG_VOLTAGE 3.3 [current_design]
set_property CFGBVS VCCO [current_design]
