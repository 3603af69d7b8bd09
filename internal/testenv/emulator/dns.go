package emulator

import (
	"context"
	"net"

	"golang.org/x/net/dns/dnsmessage"
)

// ResolveToLoopback points the process's resolver (net.DefaultResolver), for the test, at a
// DNS server of its own on 127.0.0.1 that answers 127.0.0.1 for every name. Clients that
// address a storage account by host name (<account>.<storage domain>, as kopia's Azure
// storage does) then reach an emulator on 127.0.0.1, and no lookup leaves the machine. Tests
// that call it must not run in parallel with others.
func ResolveToLoopback(t TB) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go answerLoopback(pc)
	previous := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
	t.Cleanup(func() {
		net.DefaultResolver = previous
		_ = pc.Close()
	})
}

// answerLoopback answers each query on pc until it is closed: an A record 127.0.0.1 for an A
// question, no record for any other.
func answerLoopback(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		if q.Type == dnsmessage.TypeA {
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}})
		}
		if msg, err := b.Finish(); err == nil {
			_, _ = pc.WriteTo(msg, addr)
		}
	}
}
