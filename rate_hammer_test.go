package workerpool_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// Attacks on rates, levels and weights from sides the other tests do not
// take: take-backs of every kind racing the hand-outs whose tokens they
// give back, at random; rates changed while tasks wait and run; levels
// under pauses and resizes; a weighted sub-pool at its limit. Each runs
// many seeds, in a synctest bubble, so that time is exact and the checks
// can be too.

func TestAtkTakeBacksRacingHandOutsNeverBreakARate(t *testing.T) {
	for seed := range uint64(rounds(12)) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 39))
				p := workerpool.New(1 + rng.IntN(4))
				a := p.Subpool("a", 1+rng.IntN(3))
				a.SetRate(workerpool.Every(30*time.Millisecond), 2)
				b := p.Subpool("b", 4)
				b.SetKeyRate(workerpool.Every(50*time.Millisecond), 1)
				var log startLog
				var wg sync.WaitGroup
				work := func(group string) func() { return log.task(group, time.Duration(rng.IntN(20))*time.Millisecond) }
				for i := range 60 {
					switch rng.IntN(9) {
					case 0:
						require.NoError(t, a.Submit(work("a")))
					case 1:
						require.NoError(t, a.Priority(1+rng.IntN(2)).Submit(work("a")))
					case 2:
						key := fmt.Sprint("k", rng.IntN(3))
						require.NoError(t, b.Priority(rng.IntN(2)).SubmitKey(key, work(key)))
					case 3:
						// A Call that gives up, in the queue or in the outbox.
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(40))*time.Millisecond)
						wg.Add(1)
						go func() {
							defer wg.Done()
							defer cancel()
							workerpool.Call(ctx, a, func(context.Context) (int, error) { log.task("a", 0)(); return 0, nil })
						}()
					case 4:
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(30))*time.Millisecond)
						wg.Add(1)
						go func() { defer wg.Done(); defer cancel(); p.Pause(ctx) }()
					case 5:
						a.Resize(1 + rng.IntN(3))
					case 6:
						p.Resize(1 + rng.IntN(4))
					case 7:
						// A new queue's turn takes back what other queues
						// have in the outbox.
						require.NoError(t, p.Subpool(fmt.Sprint("new", i), 1).Submit(func() {}))
					default:
						time.Sleep(time.Duration(rng.IntN(25)) * time.Millisecond)
					}
				}
				wg.Wait()
				p.StopWait()
				assertPaced(t, "sub-pool a", log.get("a"), 1000.0/30, 2)
				for k := range 3 {
					key := fmt.Sprint("k", k)
					assertPaced(t, "key "+key, log.get(key), 20, 1)
				}
			})
		})
	}
}

func TestAtkARateChangedWhileTasksRunNeverLetsMoreStartThanEitherAllows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		p.SetRate(workerpool.Every(100*time.Millisecond), 3)
		var log startLog
		for range 40 {
			require.NoError(t, p.Submit(log.task("t", 150*time.Millisecond)))
		}
		time.Sleep(time.Second) // 3 + 10 started at most
		n := len(log.get("t"))
		assert.LessOrEqual(t, n, 3+10)
		p.SetRate(workerpool.Every(10*time.Millisecond), 1) // faster, with the whole tokens held: none
		changed := time.Now()
		time.Sleep(500 * time.Millisecond)
		later := slices.DeleteFunc(log.get("t"), func(at time.Time) bool { return at.Before(changed) })
		assertPaced(t, "after the change", later, 100, 1)
		p.SetRate(workerpool.Every(time.Hour), 5) // slower: keeps its whole tokens, or 5 if it was full
		synctest.Wait()
		before := len(log.get("t"))
		time.Sleep(time.Minute)
		assert.LessOrEqual(t, len(log.get("t")), before+5, "a slower rate lets at most its burst start in a minute")
		assert.Len(t, p.Stop(), 40-len(log.get("t")))
	})
}

func TestAtkLevelsUnderPausesAndResizesKeepTheirOrderWithinEachQueue(t *testing.T) {
	for seed := range uint64(rounds(12)) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 26))
				p := workerpool.New(1)
				a := p.Subpool("a", 1)
				ctx, cancel := context.WithCancel(context.Background())
				p.Pause(ctx)
				type task struct {
					queue, level, n int
				}
				var mu sync.Mutex
				var started []task
				var want [2][]task
				for n := range 40 {
					tk := task{queue: rng.IntN(2), level: rng.IntN(3), n: n}
					want[tk.queue] = append(want[tk.queue], tk)
					run := func() {
						mu.Lock()
						started = append(started, tk)
						mu.Unlock()
						time.Sleep(time.Millisecond)
					}
					s := []workerpool.Submitter{p.Priority(tk.level), a.Priority(tk.level)}[tk.queue]
					require.NoError(t, s.Submit(run))
					if rng.IntN(5) == 0 {
						p.Resize(1 + rng.IntN(3))
					}
				}
				p.Resize(1)
				cancel()
				p.StopWait()
				for q := range 2 {
					slices.SortStableFunc(want[q], func(x, y task) int { return y.level - x.level })
					var got []task
					for _, tk := range started {
						if tk.queue == q {
							got = append(got, tk)
						}
					}
					assert.Equal(t, want[q], got, "queue %d: by level, then acceptance", q)
				}
			})
		})
	}
}

func TestAtkAWeightedSubpoolAtItsLimitTakesNoMoreThanItsShareOnceFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(2)
		heavy := p.Subpool("heavy", 1, workerpool.WithWeight(5))
		light := p.Subpool("light", 2)
		var started atomic.Int64
		var heavyPeak peakCounter
		var order []string
		var mu sync.Mutex
		record := func(name string, d time.Duration) func() {
			return func() {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				started.Add(1)
				time.Sleep(d)
			}
		}
		for range 30 {
			require.NoError(t, heavy.Submit(func() { heavyPeak.enter(); record("h", 10*time.Millisecond)(); heavyPeak.leave() }))
			require.NoError(t, light.Submit(record("l", 10*time.Millisecond)))
		}
		p.StopWait()
		// heavy's limit of one holds it to one task at a time, whatever its
		// weight: light takes the other worker, and the turns heavy cannot
		// take. A worker that ends a task of heavy's may take one of
		// light's from the outbox before the loop sees heavy free again.
		heavyFirst := 0
		for _, name := range order[:20] {
			if name == "h" {
				heavyFirst++
			}
		}
		assert.GreaterOrEqual(t, heavyFirst, 5, "heavy gets its turns whenever it is free: %v", order[:20])
		assert.LessOrEqual(t, heavyFirst, 10, "never more than its limit allows: %v", order[:20])
		assert.LessOrEqual(t, heavyPeak.peak.Load(), int64(1), "its limit holds")
		assert.Equal(t, int64(60), started.Load())
	})
}

func TestAtkAPausedPoolWithAKeyRateStartsNoTaskAndGathersAtMostTheBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := workerpool.New(4)
		p.SetKeyRate(workerpool.Every(time.Second), 2)
		var log startLog
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Pause(ctx)
		for range 6 {
			require.NoError(t, p.SubmitKey("k", log.task("k", 0)))
		}
		time.Sleep(4 * time.Second)
		assert.Empty(t, log.get("k"), "nothing starts while paused")
		<-ctx.Done()
		p.StopWait()
		starts := log.get("k")
		require.Len(t, starts, 6)
		assertPaced(t, "key k", starts, 1, 2)
	})
}

// Each feature (a rate, a level, a weight) under each way of stopping,
// pausing, resizing and bounding the pool: nothing is lost, nothing runs
// twice, a stop's dropped tasks come back in acceptance order.
func TestAtkEachFeatureUnderStopsPausesResizesAndABound(t *testing.T) {
	type setup func(p *workerpool.Pool) workerpool.Submitter
	features := map[string]setup{
		"rate": func(p *workerpool.Pool) workerpool.Submitter {
			s := p.Subpool("s", 2)
			s.SetRate(workerpool.Every(100*time.Millisecond), 2)
			return s
		},
		"key rate": func(p *workerpool.Pool) workerpool.Submitter {
			p.SetKeyRate(workerpool.Every(100*time.Millisecond), 1)
			return keyed{p}
		},
		"level": func(p *workerpool.Pool) workerpool.Submitter { return p.Priority(2) },
		"weight": func(p *workerpool.Pool) workerpool.Submitter {
			return p.Subpool("w", 2, workerpool.WithWeight(3))
		},
	}
	ops := map[string]func(t *testing.T, p *workerpool.Pool, ran *atomic.Int64, names []string, got *starts){
		"StopWait": func(t *testing.T, p *workerpool.Pool, ran *atomic.Int64, names []string, got *starts) {
			p.StopWait()
			assert.Equal(t, int64(len(names)), ran.Load(), "every task ran")
		},
		"Stop": func(t *testing.T, p *workerpool.Pool, ran *atomic.Int64, names []string, got *starts) {
			time.Sleep(150 * time.Millisecond)
			dropped := p.Stop()
			n := ran.Load()
			for _, fn := range dropped {
				fn()
			}
			assert.Equal(t, int64(len(names)), ran.Load(), "every task ran once, or came back")
			assert.Equal(t, names[n:], got.got()[n:], "the dropped ones are the last accepted, in order")
		},
		"Shutdown": func(t *testing.T, p *workerpool.Pool, ran *atomic.Int64, names []string, got *starts) {
			ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			defer cancel()
			dropped, _ := p.Shutdown(ctx)
			assert.Equal(t, int64(len(names)), ran.Load()+int64(len(dropped)))
		},
		"Pause and Resize": func(t *testing.T, p *workerpool.Pool, ran *atomic.Int64, names []string, got *starts) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			p.Pause(ctx)
			before := ran.Load()
			p.Resize(1)
			time.Sleep(900 * time.Millisecond)
			assert.Equal(t, before, ran.Load(), "nothing starts while paused")
			p.Resize(3)
			p.StopWait()
			assert.Equal(t, int64(len(names)), ran.Load())
		},
	}
	for fname, feature := range features {
		for oname, op := range ops {
			t.Run(fname+"/"+oname, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := workerpool.New(2, workerpool.WithMaxWaiting(8))
					s := feature(p)
					var ran atomic.Int64
					var got starts
					var names []string
					for i := range 12 {
						name := fmt.Sprint(i)
						names = append(names, name)
						require.NoError(t, s.Submit(func() { got.task(name)(); ran.Add(1); time.Sleep(10 * time.Millisecond) }))
					}
					if oname == "StopWait" && fname != "key rate" { // SubmitKey waits for room
						// The bound holds for each feature: a full queue
						// rejects a try.
						assert.ErrorIs(t, s.TrySubmit(func() {}), workerpool.ErrQueueFull)
					}
					op(t, p, &ran, names, &got)
				})
			})
		}
	}
}

// keyed submits every task of a pool with one key.
type keyed struct{ *workerpool.Pool }

func (k keyed) Submit(fn func()) error    { return k.Pool.SubmitKey("k", fn) }
func (k keyed) TrySubmit(fn func()) error { return k.Pool.SubmitKey("k", fn) }
