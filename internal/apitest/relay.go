package apitest

import (
	"net"
	"testing"
)

// Relay listens on a loopback port until the test ends and, for each
// connection a client makes there, dials target and hands both to serve,
// in a goroutine of their own: the tests' proxies, which cut, count or
// hold what passes, are what serve does. A dial that fails closes the
// client's connection.
func Relay(t testing.TB, target string, serve func(client, server net.Conn)) net.Addr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			go serve(client, server)
		}
	}()
	return ln.Addr()
}
