package child

// Done is closed when Wait's result is ready (the program only calls Wait).
func (p *Process) Done() <-chan struct{} { return p.done }
