package main

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// runPorts prints n free loopback TCP ports on one line, as the OS hands
// them out: the tour starts its Redis and demo processes on them rather
// than on fixed ports that another program may hold. The ports are held
// together until all are known, so they are distinct.
func runPorts(args []string, stdout, stderr io.Writer) int {
	n := 1
	if len(args) > 1 {
		fmt.Fprintln(stderr, "usage: demo ports [N]")
		return 2
	}
	if len(args) == 1 {
		v, err := strconv.Atoi(args[0])
		if err != nil || v < 1 || v > 100 {
			fmt.Fprintf(stderr, "ports: N must be a number from 1 to 100, got %q\n", args[0])
			return 2
		}
		n = v
	}
	ports := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintf(stderr, "ports: %v\n", err)
			return 1
		}
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	fmt.Fprintln(stdout, strings.Join(ports, " "))
	return 0
}
