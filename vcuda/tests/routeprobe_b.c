/* routeprobe_b.c - the definition of vcuda_probe that RTLD_NEXT from routeprobe_a must find. */
int vcuda_probe(void);

int vcuda_probe(void)
{
	return 2;
}
