# The maximum sustainable rate that the latency and sustained parts take
# fractions of: the lower of unthrottled pgbench calling outbox_send (8
# clients, delivery on) and one shard's drain rate (from the drain part if
# it ran, else a shorter drain). Measured once per invocation.
package Bench::Rate;

use strict;
use warnings;
use Bench::Stats qw(median);

sub max_rate
{
	my ($ctx) = @_;
	return $ctx->{max_rate} if $ctx->{max_rate};
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	$env->set_shards(1);
	$env->warm_up;
	$env->log("maximum rate: unthrottled pgbench (8 clients, $cfg->{max_rate_seconds}s, delivery on)");
	my $r = $env->pgbench($env->latency_script('bench'), '-c', 8, '-j', 2, '-T', $cfg->{max_rate_seconds});
	my $tps = $res->record('rate', 'pgbench_max_tps', 'tps', 1, $r->{tps});
	$env->wait_empty(600);
	my $drain = median(@{ $ctx->{drain_s1_rates} // [] });
	if (!defined $drain)
	{
		$drain = Bench::Part::Drain::drain_once($ctx, 1, 's1', 'rate', int($cfg->{drain_events} / 5));
		$env->set_enabled(1);
	}
	$res->record('rate', 'drain_rate_used', 'events/s', 1, $drain);
	$ctx->{max_rate} = int($tps < $drain ? $tps : $drain);
	$res->record('rate', 'max_rate', 'events/s', 1, $ctx->{max_rate});
	return $ctx->{max_rate};
}

1;
