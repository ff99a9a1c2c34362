package plan

import (
	"errors"
	"testing"
)

func TestAllocatorReplay(t *testing.T) {
	t.Parallel()
	const MiB = 1 << 20
	m := func(id int, size int64) allocEvent { return allocEvent{ID: id, Size: size} }
	f := func(id int) allocEvent { return allocEvent{ID: id, Free: true} }
	for _, tc := range []struct {
		name   string
		events []allocEvent
		cap    int64
		want   allocPeaks
		err    error
	}{
		{"one byte: 512 in a 2 MiB small segment", []allocEvent{m(1, 1)}, 0, allocPeaks{512, 2 * MiB}, nil},
		{"rounded to 512", []allocEvent{m(1, 513)}, 0, allocPeaks{1024, 2 * MiB}, nil},
		{"small requests share a segment", []allocEvent{m(1, MiB), m(2, MiB)}, 0, allocPeaks{2 * MiB, 2 * MiB}, nil},
		{"a third needs a second segment", []allocEvent{m(1, MiB), m(2, MiB), m(3, 512)}, 0, allocPeaks{2*MiB + 512, 4 * MiB}, nil},
		{"1-10 MiB: a 20 MiB segment, split", []allocEvent{m(1, 3*MiB), m(2, 3*MiB)}, 0, allocPeaks{6 * MiB, 20 * MiB}, nil},
		{"10 MiB and more: rounded up to 2 MiB", []allocEvent{m(1, 10*MiB+1)}, 0, allocPeaks{10*MiB + 512, 12 * MiB}, nil},
		// 12 MiB segment, 11 MiB taken: the 1 MiB rest is not split off
		// (large pool: rest must exceed 1 MiB), so the block counts whole
		{"large rest of 1 MiB is not split", []allocEvent{m(1, 11*MiB+1)}, 0, allocPeaks{12 * MiB, 12 * MiB}, nil},
		{"a freed block is reused", []allocEvent{m(1, 30*MiB), f(1), m(2, 30*MiB)}, 0, allocPeaks{30 * MiB, 30 * MiB}, nil},
		// the 40 MiB segment is split for 10; the 30 MiB rest holds the
		// next 30 without a new segment
		{"a larger free block is split", []allocEvent{m(1, 40*MiB), f(1), m(2, 10*MiB), m(3, 30*MiB)}, 0, allocPeaks{40 * MiB, 40 * MiB}, nil},
		// two segments' free blocks never merge: 20 + 20 free, 30 needs a new one
		{"segments do not merge", []allocEvent{m(1, 20*MiB), m(2, 20*MiB), f(1), f(2), m(3, 30*MiB)}, 0, allocPeaks{40 * MiB, 70 * MiB}, nil},
		// neighbours of one segment do: 40 split into 20+20, both freed, 40 again
		{"neighbours merge", []allocEvent{m(1, 40*MiB), f(1), m(2, 20*MiB), m(3, 20*MiB), f(2), f(3), m(4, 40*MiB)}, 0, allocPeaks{40 * MiB, 40 * MiB}, nil},
		// best fit: 30 and 50 free; 25 takes the 30 (split), 45 the 50
		{"best fit", []allocEvent{m(1, 30*MiB), m(2, 50*MiB), f(1), f(2), m(3, 25*MiB), m(4, 45*MiB)}, 0, allocPeaks{80 * MiB, 80 * MiB}, nil},
		// the backward's pattern: a growing request finds only smaller free blocks
		{"growing requests fragment", []allocEvent{m(1, 10*MiB), m(2, 20*MiB), f(1), m(3, 40*MiB), f(2), m(4, 80*MiB)}, 0, allocPeaks{120 * MiB, 150 * MiB}, nil},
		// at the device's capacity the free segments go back and the request is retried
		{"release at capacity", []allocEvent{m(1, 40*MiB), f(1), m(2, 50*MiB)}, 60 * MiB, allocPeaks{50 * MiB, 50 * MiB}, nil},
		{"out of memory", []allocEvent{m(1, 40*MiB), m(2, 50*MiB)}, 60 * MiB, allocPeaks{40 * MiB, 40 * MiB}, errAllocOOM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := replayAllocator(tc.events, tc.cap)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Errorf("got %+v, %v; want %+v, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestAllocatorReplayErrors(t *testing.T) {
	t.Parallel()
	for _, events := range [][]allocEvent{
		{{ID: 1, Free: true}},
		{{ID: 1, Size: 8}, {ID: 1, Size: 8}},
		{{ID: 1, Size: 0}},
	} {
		if _, err := replayAllocator(events, 0); err == nil {
			t.Errorf("%+v: no error", events)
		}
	}
}
