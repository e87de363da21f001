package amqp

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/trident-broker/trident/protocol/amqp/wire"
)

// confirmFrame is a basic.ack or basic.nack as the client sees it.
type confirmFrame struct {
	tag      uint64
	multiple bool
	ok       bool
}

func newConfirmConn() (*conn, *channel) {
	c := &conn{}
	c.w.Init()
	return c, &channel{c: c, id: 1}
}

// drainConfirms takes what the writer would write and decodes it.
func drainConfirms(t *testing.T, c *conn) []confirmFrame {
	t.Helper()
	c.w.Mu.Lock()
	c.writeConfirmRunsLocked()
	out := c.w.Buf
	c.w.Buf = nil
	c.w.Mu.Unlock()
	r := bufio.NewReader(bytes.NewReader(out))
	var fs []confirmFrame
	for {
		f, err := wire.ReadFrame(r, 1<<20, nil)
		if err != nil {
			return fs
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *wire.BasicAck:
			fs = append(fs, confirmFrame{m.DeliveryTag, m.Multiple, true})
		case *wire.BasicNack:
			fs = append(fs, confirmFrame{m.DeliveryTag, m.Multiple, false})
		default:
			t.Fatalf("unexpected %s", m.Name())
		}
	}
}

func TestConfirmCoalescing(t *testing.T) {
	type in struct {
		tag uint64
		ok  bool
	}
	tests := []struct {
		name string
		in   [][]in // batches: the writer runs between them
		want []confirmFrame
	}{
		{"one", [][]in{{{1, true}}}, []confirmFrame{{1, false, true}}},
		{"run", [][]in{{{1, true}, {2, true}, {3, true}}}, []confirmFrame{{3, true, true}}},
		{"two batches", [][]in{{{1, true}, {2, true}}, {{3, true}, {4, true}, {5, true}}},
			[]confirmFrame{{2, true, true}, {5, true, true}}},
		{"nack alone", [][]in{{{1, true}, {2, true}, {3, false}, {4, true}, {5, true}}},
			[]confirmFrame{{2, true, true}, {3, false, false}, {5, true, true}}},
		{"nacks in a row", [][]in{{{1, false}, {2, false}, {3, true}}},
			[]confirmFrame{{1, false, false}, {2, false, false}, {3, false, true}}},
		{"out of order", [][]in{{{2, true}, {1, true}, {3, true}, {4, true}}},
			[]confirmFrame{{2, false, true}, {1, false, true}, {4, true, true}}},
		{"out of order nack", [][]in{{{1, true}, {3, false}, {2, true}, {4, true}, {5, true}}},
			[]confirmFrame{{1, false, true}, {3, false, false}, {2, false, true}, {5, true, true}}},
		{"gap waits", [][]in{{{1, true}, {2, true}, {4, true}}, {{3, true}, {5, true}}},
			[]confirmFrame{{2, true, true}, {4, false, true}, {3, false, true}, {5, false, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ch := newConfirmConn()
			var got []confirmFrame
			for _, batch := range tt.in {
				for _, x := range batch {
					c.sendConfirm(ch, x.tag, x.ok)
				}
				got = append(got, drainConfirms(t, c)...)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestConfirmCoalescingModel checks random orders against what a client
// makes of the frames (a multiple ack settles every tag from the lowest
// unsettled one up to its own, as amqp091-go does): each tag is settled exactly once,
// with its own outcome.
func TestConfirmCoalescingModel(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rng.IntN(60)
		outcome := make([]bool, n+1)
		order := make([]uint64, n)
		for i := range order {
			order[i] = uint64(i + 1)
			outcome[i+1] = rng.IntN(8) != 0
		}
		// Mostly in order, with some tags swapped (a persistent message
		// confirmed after a later transient one).
		for range rng.IntN(4) {
			i, j := rng.IntN(n), rng.IntN(n)
			order[i], order[j] = order[j], order[i]
		}
		c, ch := newConfirmConn()
		var frames []confirmFrame
		for _, tag := range order {
			c.sendConfirm(ch, tag, outcome[tag])
			if rng.IntN(5) == 0 {
				frames = append(frames, drainConfirms(t, c)...)
			}
		}
		frames = append(frames, drainConfirms(t, c)...)
		settled := make([]int, n+1)
		for _, f := range frames {
			if f.tag < 1 || f.tag > uint64(n) {
				t.Fatalf("seed %d: frame %+v out of range", seed, f)
			}
			lo := f.tag
			if f.multiple {
				// It settles every unsettled tag up to its own; none of
				// them may have been settled out of order before (a
				// client such as amqp091-go would settle it twice).
				lo = 1
				for lo <= f.tag && settled[lo] > 0 {
					lo++
				}
			}
			for tag := lo; tag <= f.tag; tag++ {
				settled[tag]++
				if outcome[tag] != f.ok {
					t.Fatalf("seed %d: tag %d settled ok=%v, want %v (frames %v, order %v)", seed, tag, f.ok, outcome[tag], frames, order)
				}
			}
		}
		for tag := 1; tag <= n; tag++ {
			if settled[tag] != 1 {
				t.Fatalf("seed %d: tag %d settled %d times (frames %v, order %v)", seed, tag, settled[tag], frames, order)
			}
		}
	}
}
