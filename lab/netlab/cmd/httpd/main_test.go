package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func do(t *testing.T, h http.Handler, method, target string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

func TestReadyzFollowsThePattern(t *testing.T) {
	rp := &readyzPattern{}
	h := handler("n1", rp)
	if code, body := do(t, h, http.MethodPut, "/-/readyz?pattern=udd"); code != http.StatusNoContent {
		t.Fatalf("PUT pattern: %d %s", code, body)
	}
	var got []int
	for range 7 {
		code, _ := do(t, h, http.MethodGet, "/readyz")
		got = append(got, code)
	}
	want := []int{200, 503, 503, 200, 503, 503, 200}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("answers %v, want %v", got, want)
		}
	}
	// Other paths (the client's probes) are never failed and do not
	// advance the pattern.
	if code, body := do(t, h, http.MethodGet, "/"); code != 200 || body != "n1" {
		t.Errorf("GET / = %d %q, want 200 n1", code, body)
	}
	if _, body := do(t, h, http.MethodGet, "/-/readyz"); body != "pattern=udd served=7 failed=4" {
		t.Errorf("GET /-/readyz = %q", body)
	}
	// A new pattern starts from its first letter, counters reset.
	do(t, h, http.MethodPut, "/-/readyz?pattern=d")
	if code, _ := do(t, h, http.MethodGet, "/readyz"); code != 503 {
		t.Errorf("pattern d: /readyz = %d, want 503", code)
	}
	do(t, h, http.MethodPut, "/-/readyz?pattern=")
	if code, body := do(t, h, http.MethodGet, "/readyz"); code != 200 || body != "n1" {
		t.Errorf("empty pattern: /readyz = %d %q, want 200 n1", code, body)
	}
}

func TestReadyzRejectsABadPattern(t *testing.T) {
	rp := &readyzPattern{}
	h := handler("n1", rp)
	if code, _ := do(t, h, http.MethodPut, "/-/readyz?pattern=uxd"); code != http.StatusBadRequest {
		t.Errorf("bad pattern: %d, want 400", code)
	}
	if code, _ := do(t, h, http.MethodGet, "/readyz"); code != 200 {
		t.Errorf("after a rejected pattern /readyz = %d, want 200 (unchanged)", code)
	}
}
