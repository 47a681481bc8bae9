module github.com/dispatchkit/workerpool

go 1.26

require github.com/gammazero/deque v1.2.3

require (
	github.com/stretchr/testify v1.12.1
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
