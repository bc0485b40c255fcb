package faultnet

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return l.Addr().String()
}

func dialFrom(t *testing.T, src, addr string) net.Conn {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func roundTrip(c net.Conn) error {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := bufio.NewReader(c).ReadString('\n')
	return err
}

func TestIsolateAndHeal(t *testing.T) {
	n := New()
	defer n.Close()
	n.Node("a", "127.0.0.11")
	n.Node("b", "127.0.0.12")
	n.Node("c", "127.0.0.13")
	toB, err := n.Proxy("127.0.0.1:0", "b", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	fromA := dialFrom(t, "127.0.0.11", toB)
	defer fromA.Close()
	if err := roundTrip(fromA); err != nil {
		t.Fatalf("before the partition: %v", err)
	}
	n.Isolate("a")
	if err := roundTrip(fromA); err == nil {
		t.Fatal("an open connection from the isolated node still works")
	}
	again := dialFrom(t, "127.0.0.11", toB)
	if err := roundTrip(again); err == nil {
		t.Fatal("a new connection from the isolated node works")
	}
	again.Close()
	fromC := dialFrom(t, "127.0.0.13", toB)
	if err := roundTrip(fromC); err != nil {
		t.Fatalf("c to b is not part of the partition: %v", err)
	}
	fromC.Close()
	n.Heal()
	healed := dialFrom(t, "127.0.0.11", toB)
	defer healed.Close()
	if err := roundTrip(healed); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}
