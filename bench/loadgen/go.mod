module tidal.local/bench/loadgen

go 1.24
