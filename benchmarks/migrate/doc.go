// Package migrate tries the recipes of docs/migrating.md on three small
// programs of the kinds that real users migrated: an event bus with one
// gammazero/workerpool pool per subscriber, a wrapper that embeds a
// gammazero pool to collect results, and a priority queue of requests in
// front of an ants pool. Each program is here twice: before (on the peer,
// in a file named after it) and after (on workerpool), changed only as the
// recipe says. The tests check that both give the same result, and show
// the two ways a migration that fixes only what the compiler reports can
// hang: a recovered gammazero panic, and ants' Release mapped to Stop.
//
// It lives in the benchmarks module, which already requires the peers, so
// that the library's go.mod keeps its own dependencies.
package migrate
