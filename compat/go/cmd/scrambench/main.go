// Command scrambench measures SCRAM logins per second: each login is a new TCP
// connection, ApiVersions, SaslHandshake and the two SaslAuthenticate round trips
// of SCRAM (franz-go's client), then the connection is closed. Several workers log
// in at once; it prints the rate and the p50/p99 of one login.
//
//	scrambench -seed 127.0.0.1:9094 -user alice -pass secret [-mech 512] [-n 2000] [-c 4]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func main() {
	seed := flag.String("seed", "127.0.0.1:9094", "a SASL_PLAINTEXT listener")
	user := flag.String("user", "", "SCRAM user")
	pass := flag.String("pass", "", "its password")
	mech := flag.Int("mech", 512, "256 or 512")
	n := flag.Int("n", 2000, "logins")
	c := flag.Int("c", 4, "concurrent workers")
	flag.Parse()
	auth := scram.Auth{User: *user, Pass: *pass}
	m := auth.AsSha512Mechanism()
	if *mech == 256 {
		m = auth.AsSha256Mechanism()
	}
	var mu sync.Mutex
	var took []time.Duration
	var failures int
	jobs := make(chan struct{}, *n)
	for i := 0; i < *n; i++ {
		jobs <- struct{}{}
	}
	close(jobs)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				t := time.Now()
				err := login(*seed, m)
				d := time.Since(t)
				mu.Lock()
				if err != nil {
					failures++
					if failures == 1 {
						fmt.Fprintln(os.Stderr, "login failed:", err)
					}
				} else {
					took = append(took, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	if len(took) == 0 {
		fmt.Println("scrambench: no login succeeded")
		os.Exit(1)
	}
	pct := func(p float64) time.Duration { return took[int(float64(len(took)-1)*p)] }
	fmt.Printf("scrambench: %d logins in %.2fs = %.0f/s, p50 %.2fms p99 %.2fms, %d failed\n",
		len(took), elapsed.Seconds(), float64(len(took))/elapsed.Seconds(),
		float64(pct(0.5).Microseconds())/1000, float64(pct(0.99).Microseconds())/1000, failures)
	if failures > 0 {
		os.Exit(1)
	}
}

// login opens one authenticated connection (a Metadata request forces it) and closes it.
func login(seed string, m sasl.Mechanism) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.SASL(m))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	return err
}
