// Loopback ports for the servers tests start (memcached, an S3 server).
#ifndef NOSTALL_TESTING_PORTS_H_
#define NOSTALL_TESTING_PORTS_H_

namespace nostall::testing {

int FreePort();          // a port nothing listens on now (0 if none found)
bool Accepts(int port);  // something on 127.0.0.1:`port` takes connections

}  // namespace nostall::testing

#endif  // NOSTALL_TESTING_PORTS_H_
