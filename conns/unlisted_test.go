package conns

import (
	"fmt"
	"slices"
	"testing"
)

func TestUnlisted(t *testing.T) {
	const vip = "192.0.2.10:6443"
	c := func(client string, port int) Conn { return conn(vip, fmt.Sprintf("%s:%d", client, port)) }
	ports := func(client string, from, to int, skip ...int) []Conn {
		var out []Conn
		for p := from; p < to; p++ {
			if !slices.Contains(skip, p) {
				out = append(out, c(client, p))
			}
		}
		return out
	}
	cases := []struct {
		name      string
		published Set
		own       Set
		span      int
		want      []Conn
	}{
		{
			name:      "a kubectl's connection opened after the list: the ports between the list and the client's first new connection",
			published: NewSet(c("198.51.100.7", 40000), c("198.51.100.7", 40010)),
			own:       NewSet(c("198.51.100.7", 40030), c("198.51.100.7", 40032)),
			span:      64,
			want:      ports("198.51.100.7", 40011, 40030),
		},
		{
			name:      "the list long ago: span ports below the first new connection",
			published: NewSet(c("198.51.100.7", 33000)),
			own:       NewSet(c("198.51.100.7", 50000)),
			span:      64,
			want:      ports("198.51.100.7", 50000-64, 50000),
		},
		{
			name:      "this node's own connections in the gap are left out",
			published: NewSet(c("198.51.100.7", 40000)),
			own:       NewSet(c("198.51.100.7", 40004), c("198.51.100.7", 40008), c("198.51.100.7", 40006)),
			span:      64,
			want:      ports("198.51.100.7", 40001, 40004),
		},
		{
			name:      "a client that has not come back: nothing",
			published: NewSet(c("198.51.100.7", 40000)),
			own:       NewSet(c("198.51.100.8", 40100)),
			span:      64,
			want:      nil,
		},
		{
			name:      "a client whose ports wrapped around (the new ones below the list's): nothing",
			published: NewSet(c("198.51.100.7", 60990)),
			own:       NewSet(c("198.51.100.7", 32800)),
			span:      64,
			want:      nil,
		},
		{
			name:      "another VIP port is another counter",
			published: NewSet(c("198.51.100.7", 40000)),
			own:       NewSet(conn("192.0.2.10:443", "198.51.100.7:40100")),
			span:      64,
			want:      nil,
		},
		{
			name:      "no span: nothing",
			published: NewSet(c("198.51.100.7", 40000)),
			own:       NewSet(c("198.51.100.7", 40004)),
			span:      0,
			want:      nil,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unlisted(tc.published, tc.own, tc.span); !slices.Equal(got, tc.want) {
				t.Errorf("Unlisted = %v, want %v", got, tc.want)
			}
		})
	}
}
