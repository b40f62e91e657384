//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/tupper-dev/tupper/agent/spec/process"
	"github.com/tupper-dev/tupper/agent/spec/process/processconnect"
)

type processService struct{ a *Agent }

var _ processconnect.ProcessHandler = (*processService)(nil)

// defaultKeepalive is envd's keepalive interval when the client sends no
// Keepalive-Ping-Interval header.
const defaultKeepalive = 90 * time.Second

func keepaliveInterval(h http.Header) time.Duration {
	if v := h.Get("Keepalive-Ping-Interval"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return time.Duration(n) * time.Second
		}
	}
	return defaultKeepalive
}

func (s *processService) user(h http.Header) (*osUser, error) {
	u, err := s.a.userFor("", h)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	return u, nil
}

func (s *processService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	var out process.ListResponse
	for _, p := range s.a.procs.list() {
		out.Processes = append(out.Processes, p.info())
	}
	return connect.NewResponse(&out), nil
}

func (s *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	u, err := s.user(req.Header())
	if err != nil {
		return err
	}
	// connect-go turned Connect-Timeout-Ms into ctx's deadline; envd kills
	// the process at that moment, whether or not anyone still listens.
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	if req.Msg.GetProcess() == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process is required"))
	}
	spec := startSpec{
		cfg:     req.Msg.GetProcess(),
		tag:     req.Msg.Tag,
		user:    u,
		stdin:   req.Msg.Stdin == nil || *req.Msg.Stdin, // unset means true, as in envd
		pty:     req.Msg.GetPty(),
		timeout: timeout,
	}
	sub := newSubscriber()
	p, err := s.a.start(spec, sub)
	if err != nil {
		var se *errStart
		if errors.As(err, &se) {
			code := connect.CodeInvalidArgument
			if se.exhausted {
				code = connect.CodeResourceExhausted
			}
			return connect.NewError(code, err)
		}
		return connect.NewError(connect.CodeInternal, err)
	}
	defer p.unsubscribe(sub)
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) }
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}); err != nil {
		return err
	}
	return forward(ctx, p, sub, nil, send, keepaliveInterval(req.Header()), true)
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	p := s.a.procs.find(req.Msg.GetProcess(), true)
	if p == nil {
		return connect.NewError(connect.CodeNotFound, errors.New("process not found"))
	}
	sub := newSubscriber()
	end := p.subscribe(sub)
	defer p.unsubscribe(sub)
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.ConnectResponse{Event: ev}) }
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}); err != nil {
		return err
	}
	return forward(ctx, p, sub, end, send, keepaliveInterval(req.Header()), false)
}

// forward sends p's events from sub until the end event. If ended is set the
// process has already finished and only the end event is sent. When ctx hits
// its deadline (Connect-Timeout-Ms) on a Start stream, the process is being
// killed by its own timer: forward waits briefly for its end event, sends it
// and ends the stream with deadline_exceeded.
func forward(ctx context.Context, p *proc, sub *subscriber, ended *process.ProcessEvent_EndEvent, send func(*process.ProcessEvent) error, keepalive time.Duration, owner bool) error {
	if ended != nil {
		return send(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: ended}})
	}
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev); err != nil {
				return err
			}
			if _, ok := ev.Event.(*process.ProcessEvent_End); ok {
				if owner && p.timedOut.Load() {
					return connect.NewError(connect.CodeDeadlineExceeded, errors.New("process killed: timeout reached"))
				}
				return nil
			}
			tick.Reset(keepalive)
		case <-tick.C:
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ctx.Err()
			}
			if owner {
				// The kill timer fires at the same moment; make sure.
				p.timedOut.Store(true)
				_ = p.signalGroup(syscall.SIGKILL)
				grace := time.NewTimer(2 * time.Second)
				defer grace.Stop()
			drain:
				for {
					select {
					case ev := <-sub.ch:
						if send(ev) != nil {
							break drain
						}
						if _, ok := ev.Event.(*process.ProcessEvent_End); ok {
							break drain
						}
					case <-grace.C:
						break drain
					}
				}
			}
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline exceeded"))
		}
	}
}

func (s *processService) running(sel *process.ProcessSelector) (*proc, error) {
	if sel == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector is required"))
	}
	p := s.a.procs.find(sel, false)
	if p == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("process not found"))
	}
	return p, nil
}

func (s *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if sz := req.Msg.GetPty().GetSize(); sz != nil {
		if p.term == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("process has no pty"))
		}
		if err := resizePTY(p.term, sz.GetCols(), sz.GetRows()); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("resize pty: %w", err))
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

func (p *proc) write(in *process.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *process.ProcessInput_Stdin:
		p.mu.Lock()
		f := p.stdin
		p.mu.Unlock()
		if f == nil {
			if p.term != nil {
				return connect.NewError(connect.CodeFailedPrecondition, errors.New("process has a pty: send pty input"))
			}
			return connect.NewError(connect.CodeFailedPrecondition, errors.New("stdin not enabled or closed"))
		}
		// Not under p.mu: a full pipe blocks here, and output must keep
		// flowing meanwhile or the process never drains its stdin.
		p.stdinMu.Lock()
		_, err := f.Write(v.Stdin)
		p.stdinMu.Unlock()
		if err != nil {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("write stdin of process %d: %w", p.pid, err))
		}
	case *process.ProcessInput_Pty:
		if p.term == nil {
			return connect.NewError(connect.CodeFailedPrecondition, errors.New("process has no pty: send stdin input"))
		}
		if _, err := p.term.Write(v.Pty); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("write pty of process %d: %w", p.pid, err))
		}
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input is required"))
	}
	return nil
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.write(req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *process.StreamInputRequest_Start:
			q, err := s.running(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = q
		case *process.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("start event must come first"))
			}
			if err := p.write(ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func (s *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	// Any signal number is accepted (Tupper's client sends e.g. SIGINT as a
	// raw enum value); E2B's SDKs send only SIGTERM and SIGKILL.
	sig := int32(req.Msg.GetSignal())
	if sig <= 0 || sig > 64 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid signal %d", sig))
	}
	if err := p.signalGroup(syscall.Signal(sig)); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("signal process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if p.term != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("cannot close stdin of a pty process: send Ctrl-D (0x04) instead"))
	}
	p.closeStdin()
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}
