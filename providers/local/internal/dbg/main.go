package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
)

func main() {
	p, err := local.New(local.Config{Home: "/tmp/dbg/home", Runtime: os.Args[1], AgentPath: "/tmp/tb/tupper", Subnet: "10.214.0.0/24", Bridge: "tuppertest0"})
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Available(context.Background()), p.Capabilities())
	if len(os.Args) > 3 && os.Args[3] == "destroy" {
		l, _ := p.List(context.Background(), provider.ListFilter{})
		for _, i := range l {
			fmt.Println("destroy", i.ID, p.Destroy(context.Background(), i.ID))
		}
		return
	}
	t0 := time.Now()
	inst, err := p.Create(context.Background(), provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkMode(os.Args[2])}})
	fmt.Println(time.Since(t0), err)
	if err == nil {
		fmt.Println(inst.Info(context.Background()))
	}
}
