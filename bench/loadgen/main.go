// Command loadgen sends requests at a fixed rate (open loop: each request
// leaves on schedule whether or not earlier ones have returned) over keep-alive
// connections — POST over TLS with -ca and -body, plain GET without them — and
// prints the latency distribution as JSON. With -urls, each request goes to a URL
// drawn at random (uniformly, from a seeded generator: the same sequence every
// run) from a file of URLs, one a line. Go's client adds
// far less of its own latency than a Python one, so the figures are the server's.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "", "target URL")
	urlsFile := flag.String("urls", "", "file of target URLs, one a line; each request draws one at random (instead of -url)")
	seed := flag.Int64("seed", 1, "seed of the -urls draw")
	caFile := flag.String("ca", "", "CA certificate (PEM) that signed the server's certificate")
	bodyFile := flag.String("body", "", "request body file")
	rate := flag.Int("rate", 500, "requests per second")
	duration := flag.Duration("duration", 8*time.Second, "measured duration")
	warmup := flag.Int("warmup", 200, "requests sent before measuring")
	latenciesFile := flag.String("latencies", "", "also write every successful request's latency to this file, "+
		"in microseconds, one a line (to pool several runs' requests)")
	flag.Parse()
	urls := []string{*url}
	if *urlsFile != "" {
		text, err := os.ReadFile(*urlsFile)
		check(err)
		urls = strings.Fields(string(text))
		if len(urls) == 0 {
			check(fmt.Errorf("no URL in %s", *urlsFile))
		}
	} else if *url == "" {
		check(fmt.Errorf("-url or -urls is required"))
	}
	draw := rand.New(rand.NewSource(*seed))
	pick := func() string { return urls[draw.Intn(len(urls))] }

	transport := &http.Transport{MaxIdleConnsPerHost: 256, ForceAttemptHTTP2: false}
	if *caFile != "" {
		ca, err := os.ReadFile(*caFile)
		check(err)
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			check(fmt.Errorf("no certificate in %s", *caFile))
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	var body []byte
	if *bodyFile != "" {
		var err error
		body, err = os.ReadFile(*bodyFile)
		check(err)
	}
	// Go's transport asks for gzip and decompresses transparently, as a browser would.
	client := &http.Client{Timeout: 10 * time.Second, Transport: transport}
	send := func(target string) (time.Duration, error) {
		start := time.Now()
		var resp *http.Response
		var err error
		if body == nil {
			resp, err = client.Get(target)
		} else {
			resp, err = client.Post(target, "application/json", bytes.NewReader(body))
		}
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return time.Since(start), err
	}
	for i := 0; i < *warmup; i++ {
		_, err := send(pick())
		check(err)
	}

	total := int(float64(*rate) * duration.Seconds())
	targets := make([]string, total) // drawn before the clock starts: the schedule is the same every run
	for i := range targets {
		targets[i] = pick()
	}
	latencies := make([]time.Duration, total)
	errs := make([]error, total)
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(*rate)
	start := time.Now()
	for i := 0; i < total; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			latencies[i], errs[i] = send(targets[i])
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)

	ok := latencies[:0]
	failures := 0
	for i, l := range latencies {
		if errs[i] != nil {
			failures++
			continue
		}
		ok = append(ok, l)
	}
	sort.Slice(ok, func(a, b int) bool { return ok[a] < ok[b] })
	pct := func(q float64) float64 {
		if len(ok) == 0 {
			return 0
		}
		i := int(q*float64(len(ok)-1) + 0.5)
		return float64(ok[i].Microseconds()) / 1000
	}
	out := map[string]any{
		"requests": total, "errors": failures, "achieved_rate": float64(total) / elapsed.Seconds(),
		"ok_per_s": float64(len(ok)) / elapsed.Seconds(),
		"p50_ms":   pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99), "max_ms": pct(1.0),
	}
	if *latenciesFile != "" {
		var lines strings.Builder
		for _, l := range ok {
			fmt.Fprintf(&lines, "%d\n", l.Microseconds())
		}
		check(os.WriteFile(*latenciesFile, []byte(lines.String()), 0o644))
	}
	check(json.NewEncoder(os.Stdout).Encode(out))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}
