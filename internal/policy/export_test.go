package policy

// speed is partition's configured speed (the prior of learned ones).
func (c Config) speed(partition string) float64 { return priorSpeed(c.Speed, partition) }
