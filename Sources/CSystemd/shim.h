#include <systemd/sd-journal.h>
#include <systemd/sd-daemon.h>
