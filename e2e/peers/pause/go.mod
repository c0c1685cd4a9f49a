// Test peer: the pod sandbox's pause process, for the offline pause image.
module kuberdma.io/e2e/peers/pause

go 1.24
