package mqtt

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
)

// BenchmarkOneToOne is 16-byte PUBLISHes at qos from one raw publisher
// (batches of 256 pre-encoded packets, at most 2048 messages ahead of the
// subscriber) to one raw subscriber of the topic at qos over loopback
// TCP, which acknowledges each QoS 1 message (one write of PUBACKs per
// read). An op is one message; allocs/op are the whole process's (broker
// and clients).
func BenchmarkOneToOne(b *testing.B) {
	for _, qos := range []byte{0, 1} {
		b.Run(fmt.Sprintf("qos=%d", qos), func(b *testing.B) { benchOneToOne(b, qos) })
	}
}

func benchOneToOne(b *testing.B, qos byte) {
	addr := benchServer(b)
	sub := benchMQTTDial(b, addr, "sub", 4, "")
	body := binary.BigEndian.AppendUint16(nil, 1)
	body = append(benchString(body, "bench/t"), qos)
	if _, err := sub.Write(benchPacket(nil, 0x82, body)); err != nil {
		b.Fatal(err)
	}
	if first, _ := benchReadPacket(b, sub); first>>4 != 9 {
		b.Fatalf("SUBACK: %x", first)
	}
	got := make(chan int, 64)
	fail := make(chan error, 2)
	go benchAckingSubscriber(sub, got, fail)
	pub := benchMQTTDial(b, addr, "pub", 4, "")
	go func() { // the publisher's PUBACKs
		rb := make([]byte, 64<<10)
		for {
			if _, err := pub.Read(rb); err != nil {
				return
			}
		}
	}()

	var buf []byte
	const batch, window = 256, 2048
	for i := range batch {
		body := benchString(nil, "bench/t")
		first := byte(0x30)
		if qos == 1 {
			first = 0x32
			body = binary.BigEndian.AppendUint16(body, uint16(i+1))
		}
		buf = benchPacket(buf, first, append(body, make([]byte, 16)...))
	}
	one := len(buf) / batch
	run := func(n int) {
		sent, recv := 0, 0
		for recv < n {
			for sent < n && sent-recv+batch <= window {
				k := min(batch, n-sent)
				if _, err := pub.Write(buf[:k*one]); err != nil {
					b.Fatal(err)
				}
				sent += k
			}
			select {
			case r := <-got:
				recv += r
			case err := <-fail:
				b.Fatal(err)
			}
		}
	}
	run(20_000) // warm up: buffers and pools at their steady sizes
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
}

// benchAckingSubscriber counts the PUBLISH packets nc receives into got
// (one send per read) and answers each QoS 1 one with its PUBACK, in one
// write per read.
func benchAckingSubscriber(nc net.Conn, got chan<- int, fail chan<- error) {
	rb := make([]byte, 256<<10)
	var acks []byte
	have := 0
	for {
		n, err := nc.Read(rb[have:])
		have += n
		off, cnt := 0, 0
		acks = acks[:0]
		for have-off >= 2 {
			body, end, ok := packetAt(rb, off, have)
			if !ok {
				break
			}
			if rb[off]>>4 == 3 {
				cnt++
				if (rb[off]>>1)&3 == 1 {
					tl := int(binary.BigEndian.Uint16(rb[body:]))
					acks = append(acks, 0x40, 2, rb[body+2+tl], rb[body+3+tl])
				}
			}
			off = end
		}
		copy(rb, rb[off:have])
		have -= off
		if len(acks) > 0 {
			if _, err := nc.Write(acks); err != nil {
				fail <- err
				return
			}
		}
		if cnt > 0 {
			got <- cnt
		}
		if err != nil {
			fail <- err
			return
		}
	}
}
