// Command probe measures a VIP's reachability as a client sees it: every
// interval it starts a TCP connect + HTTP GET (no keep-alive) with a
// timeout, and prints one line per probe, "UNIX_MS ok SERVER LATENCY" or
// "UNIX_MS fail - ERROR", where SERVER is the first word of the answer (the
// lab HTTP server answers with its node name). It runs for a bounded count
// and duration and stops early on SIGTERM/SIGINT after finishing the probes
// in flight.
//
// With -hold it holds one HTTP/1.1 keep-alive connection instead, as a
// kubelet holds its watch: every interval one request on it, in turn; a
// connection that breaks (reset, closed, no answer within the timeout) is
// a fail line, and the next probe opens a new one.
//
// With -report it instead reads such output and an events file
// ("UNIX_MS LABEL" lines) and prints the per-event timeline of
// netlab.Analyze.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

func main() {
	target := flag.String("target", "192.0.2.10:6443", "host:port to probe")
	interval := flag.Duration("interval", 20*time.Millisecond, "between probe starts")
	timeout := flag.Duration("timeout", 200*time.Millisecond, "of one probe")
	duration := flag.Duration("duration", 60*time.Second, "bound on the whole run")
	count := flag.Int("count", 0, "bound on the number of probes [duration/interval]")
	report := flag.String("report", "", "print the timeline of this probe output file instead of probing")
	events := flag.String("events", "", "with -report: the events file")
	hold := flag.Bool("hold", false, "hold one keep-alive connection and send every probe on it (a new one after it breaks)")
	flag.Parse()
	if *report != "" {
		if err := printReport(os.Stdout, *report, *events, *interval); err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			os.Exit(1)
		}
		return
	}
	if *interval <= 0 || *timeout <= 0 || *duration <= 0 {
		fmt.Fprintln(os.Stderr, "probe: -interval, -timeout and -duration must be positive")
		os.Exit(2)
	}
	if *count <= 0 {
		*count = int(*duration / *interval)
		if *count == 0 {
			*count = 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *hold {
		runHold(ctx, os.Stdout, *target, *interval, *timeout, *duration, *count)
		return
	}
	run(ctx, os.Stdout, *target, *interval, *timeout, *duration, *count)
}

// runHold probes on one held connection, one request at a time.
func runHold(ctx context.Context, out io.Writer, target string, interval, timeout, duration time.Duration, count int) {
	w := bufio.NewWriter(out)
	defer w.Flush()
	var conn net.Conn
	var r *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	deadline := time.Now().Add(duration)
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; i < count && time.Now().Before(deadline); i++ {
		start := time.Now()
		if conn == nil {
			c, err := net.DialTimeout("tcp", target, timeout)
			if err != nil {
				fmt.Fprintf(w, "%d fail - connect: %s\n", start.UnixMilli(), oneLine(err.Error()))
			} else {
				conn, r = c, bufio.NewReader(c)
			}
		}
		if conn != nil {
			server, err := holdRequest(conn, r, timeout)
			if err != nil {
				fmt.Fprintf(w, "%d fail - held connection: %s\n", start.UnixMilli(), oneLine(err.Error()))
				conn.Close()
				conn = nil
			} else {
				fmt.Fprintf(w, "%d ok %s %s\n", start.UnixMilli(), server, time.Since(start).Round(time.Microsecond))
			}
		}
		w.Flush()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// holdRequest sends one GET on conn and returns the first word of the
// answer.
func holdRequest(conn net.Conn, r *bufio.Reader, timeout time.Duration) (string, error) {
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: vip\r\nConnection: keep-alive\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	f := strings.Fields(string(body))
	if len(f) == 0 {
		return "", fmt.Errorf("empty answer")
	}
	return f[0], nil
}

func run(ctx context.Context, out io.Writer, target string, interval, timeout, duration time.Duration, count int) {
	client := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			DialContext:       (&net.Dialer{Timeout: timeout}).DialContext,
		},
	}
	url := "http://" + target + "/"
	lines := make(chan string, 64)
	var printed sync.WaitGroup
	printed.Add(1)
	go func() {
		defer printed.Done()
		w := bufio.NewWriter(out)
		for l := range lines {
			w.WriteString(l)
			w.WriteByte('\n')
			if len(lines) == 0 {
				w.Flush()
			}
		}
		w.Flush()
	}()
	var inflight sync.WaitGroup
	deadline := time.Now().Add(duration)
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; i < count && time.Now().Before(deadline); i++ {
		inflight.Add(1)
		go func(start time.Time) {
			defer inflight.Done()
			lines <- probe(client, url, start)
		}(time.Now())
		select {
		case <-ctx.Done():
			i = count
		case <-t.C:
		}
	}
	inflight.Wait()
	close(lines)
	printed.Wait()
}

func probe(client *http.Client, url string, start time.Time) string {
	ms := start.UnixMilli()
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Sprintf("%d fail - %s", ms, oneLine(err.Error()))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	if err != nil {
		return fmt.Sprintf("%d fail - read: %s", ms, oneLine(err.Error()))
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("%d fail - status %d", ms, resp.StatusCode)
	}
	server := "?"
	if f := strings.Fields(string(body)); len(f) > 0 {
		server = f[0]
	}
	return fmt.Sprintf("%d ok %s %v", ms, server, time.Since(start).Round(10*time.Microsecond))
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func printReport(w io.Writer, probesPath, eventsPath string, interval time.Duration) error {
	pf, err := os.Open(probesPath)
	if err != nil {
		return err
	}
	defer pf.Close()
	probes, err := netlab.ParseProbes(pf)
	if err != nil {
		return err
	}
	var events []netlab.Event
	if eventsPath != "" {
		ef, err := os.Open(eventsPath)
		if err != nil {
			return err
		}
		defer ef.Close()
		if events, err = netlab.ParseEvents(ef); err != nil {
			return err
		}
	}
	n, d := netlab.LongestFailure(probes, interval)
	failed := 0
	for _, p := range probes {
		if !p.OK {
			failed++
		}
	}
	fmt.Fprintf(w, "%d probes every %v, %d failed; longest gap overall %v (%d failed in a row)\n",
		len(probes), interval, failed, d.Round(time.Millisecond), n)
	netlab.FormatTimeline(w, netlab.Analyze(probes, events, interval))
	return nil
}
