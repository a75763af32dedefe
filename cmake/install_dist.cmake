# install_dist.cmake: installs the configured files of dist/ (the systemd unit and the
# example configuration) at install time, so that their paths follow the prefix given
# then (cmake --install --prefix, make install PREFIX=...), not the one of configure.
# Set by CMakeLists.txt before it runs: OUTBOXD_SOURCE_DIR, OUTBOXD_BINARY_DIR,
# OUTBOXD_BINDIR (relative), OUTBOXD_SYSTEMD_UNITDIR (empty: PREFIX/lib/systemd/system),
# OUTBOXD_SYSCONFDIR (empty: /etc for the prefix /usr, else PREFIX/etc).
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(OUTBOXD_SYSCONFDIR)
  set(sysconfdir "${OUTBOXD_SYSCONFDIR}")
elseif(prefix STREQUAL "/usr")
  set(sysconfdir /etc)
else()
  set(sysconfdir "${prefix}/etc")
endif()
set(unitdir "${OUTBOXD_SYSTEMD_UNITDIR}")
if(NOT unitdir)
  set(unitdir "${prefix}/lib/systemd/system")
endif()
# what the .in files name
set(OUTBOXD_BINDIR "${prefix}/${OUTBOXD_BINDIR}")
set(OUTBOXD_CONFIG_FILE "${sysconfdir}/outboxd/outboxd.conf")
set(OUTBOXD_STATE_DIR /var/lib/outboxd) # systemd's StateDirectory=outboxd, whatever the prefix
configure_file(${OUTBOXD_SOURCE_DIR}/dist/outboxd.service.in
               ${OUTBOXD_BINARY_DIR}/dist/outboxd.service @ONLY)
configure_file(${OUTBOXD_SOURCE_DIR}/dist/outboxd.conf.in
               ${OUTBOXD_BINARY_DIR}/dist/outboxd.conf @ONLY)
# mode 0640: the file may hold tokens (the package gives it to group outboxd)
file(INSTALL ${OUTBOXD_BINARY_DIR}/dist/outboxd.conf DESTINATION "${sysconfdir}/outboxd"
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ)
file(INSTALL ${OUTBOXD_BINARY_DIR}/dist/outboxd.service DESTINATION "${unitdir}"
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
