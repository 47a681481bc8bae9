module github.com/dispatchkit/workerpool

go 1.26

require github.com/gammazero/deque v1.2.3
