// Command deadletters lists the dead letters natsjs.Run published to a
// stream, and moves them back to their subjects (natsjs.Redrive).
//
//	go run ./examples/deadletters -stream DEAD             # list
//	go run ./examples/deadletters -stream DEAD -redrive 4,7 # redrive two
//	go run ./examples/deadletters -stream DEAD -redrive all
//
// It connects to $NATS_URL, or -server. The list has one line per dead
// letter: its sequence in the dead-letter stream, when it was stored, the
// stream and subject of the job, the attempts it used, its original id
// and the error. A redriven job keeps its original id; one whose subject
// has a newer job, in a stream that keeps the latest of each subject, is
// left where it is, and said so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "deadletters:", err)
		os.Exit(1)
	}
}

// run is the command, with its arguments, writing to out.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("deadletters", flag.ContinueOnError)
	fs.SetOutput(out)
	url := fs.String("server", envOr("NATS_URL", nats.DefaultURL), "server URL")
	stream := fs.String("stream", "DEAD", "the dead-letter stream")
	redrive := fs.String("redrive", "", "dead letters to move back to their subjects: `all`, or sequences separated by commas")
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, err := nats.Connect(*url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	dead, err := js.Stream(ctx, *stream)
	if err != nil {
		return fmt.Errorf("stream %q: %w", *stream, err)
	}
	if *redrive == "" {
		return list(ctx, dead, out)
	}
	seqs, err := chosen(ctx, dead, *redrive)
	if err != nil {
		return err
	}
	var failed int
	for _, seq := range seqs {
		switch err := natsjs.Redrive(ctx, js, dead, seq); {
		case errors.Is(err, natsjs.ErrSuperseded):
			failed++
			fmt.Fprintf(out, "%d: left: a newer job of its subject is stored\n", seq)
		case err != nil:
			failed++
			fmt.Fprintf(out, "%d: %v\n", seq, err)
		default:
			fmt.Fprintf(out, "%d: redriven\n", seq)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d dead letters not redriven", failed, len(seqs))
	}
	return nil
}

// list writes one line per dead letter in dead.
func list(ctx context.Context, dead jetstream.Stream, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSTORED\tSTREAM\tSUBJECT\tATTEMPTS\tORIGINAL ID\tERROR")
	n := 0
	for dl, err := range natsjs.DeadLetters(ctx, dead) {
		if err != nil {
			return err
		}
		n++
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", dl.Sequence, dl.Time.Format(time.RFC3339), dl.Stream, dl.Subject, dl.Attempts, dl.OriginalID, dl.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d dead letters\n", n)
	return err
}

// chosen returns the sequences -redrive names: every dead letter's for
// "all".
func chosen(ctx context.Context, dead jetstream.Stream, which string) ([]uint64, error) {
	var seqs []uint64
	if which == "all" {
		for dl, err := range natsjs.DeadLetters(ctx, dead) {
			if err != nil {
				return nil, err
			}
			seqs = append(seqs, dl.Sequence)
		}
		return seqs, nil
	}
	for s := range strings.SplitSeq(which, ",") {
		seq, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("-redrive: %q is not a sequence", s)
		}
		seqs = append(seqs, seq)
	}
	return seqs, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
