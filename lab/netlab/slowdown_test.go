package netlab

import (
	"testing"
	"time"
)

func TestScaled(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
	}{
		{"", time.Second},
		{"garbage", time.Second},
		{"0.5", time.Second}, // never faster than a real machine
		{"4", 4 * time.Second},
		{"2.5", 2500 * time.Millisecond},
	} {
		t.Setenv("VIPD_LAB_SLOWDOWN", c.env)
		if got := Scaled(time.Second); got != c.want {
			t.Errorf("VIPD_LAB_SLOWDOWN=%q: Scaled(1s) = %v, want %v", c.env, got, c.want)
		}
	}
}
