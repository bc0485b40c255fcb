package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNextDoublesUpToMax(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("delay %d = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 10*time.Millisecond {
		t.Fatalf("after Reset: %v, want 10ms", got)
	}
}

func TestJitterStaysWithinItsFraction(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 0.5}
	for range 1000 {
		if d := b.Next(); d < 100*time.Millisecond || d > 150*time.Millisecond {
			t.Fatalf("delay %v outside [100ms, 150ms]", d)
		}
	}
}

func TestZeroBackoffWaitsNothing(t *testing.T) {
	var b Backoff
	if d := b.Next(); d != 0 {
		t.Fatalf("zero Backoff waits %v", d)
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on an ended context reported go on")
	}
	if Sleep(ctx, 0) {
		t.Fatal("Sleep(0) on an ended context reported go on")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep on a live context reported stop")
	}
}
